"""Running a probe: load backends, measure every task, checkpoint atomically, resume after Ctrl-C."""
from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autotune import backends as bk
from autotune.backends import BACKENDS
from autotune.core.assumptions import REMEASURE_BUDGET, REMEASURES
from autotune.core.routines import ROUTINES
from autotune.db import RECORD_DTYPE, Database, DatabaseError, DatabaseMissing, load, resolve, save
from autotune.db.noise import NOISE_RETRIED, NOISY, verdict

from . import operands
from .operands import build
from .plan import Task, expand
from .profile import Profile
from .timing import lower_median, measure

CHECKPOINT_SECONDS = 5.0
# The progress bar: redrawn at least this often (its clock runs on during a long point), the
# narrowest bar beside the "what is measured now" field (dropped if there is no room left for 10
# characters of it), and the size assumed of a terminal that reports 0 x 0.
REDRAW_SECONDS = 1.0
MIN_BAR = 10
FALLBACK_TERMINAL = (80, 24)
BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {elapsed}<{remaining} left{postfix}"
BAR_FIXED = len(" 100%|| 00:00:00<00:00:00 left, ")   # BAR_FORMAT's characters beside desc, bar and postfix
# After a multi-threaded group, wait for that library's thread pool to stop spinning (OpenBLAS
# and Intel OpenMP workers busy-wait for a while) so it does not steal a core from the next group.
SETTLE_SECONDS = 0.3
FIELD = {name: i for i, name in enumerate(RECORD_DTYPE.names)}   # a record tuple's field positions


class ProbeError(ValueError):
    """The probe cannot start as asked (bad --only, nothing to resume, ...)."""


@dataclass
class ProbeResult:
    """A point sweep's outcome; ``pending``: the run's phases after the points still to do;
    ``verdict``: whether the machine was quiet while measuring (``db.noise.verdict``, once complete)."""

    path: Path
    measured: int
    skipped_backends: dict[str, str] = field(default_factory=dict)
    complete: bool = True
    seconds: float = 0.0
    failures: dict[tuple, str] = field(default_factory=dict)
    pending: tuple[str, ...] = ()
    verdict: tuple[str, ...] = ()


def load_backends(names) -> tuple[dict, dict[str, str]]:
    """Available backends among ``names`` and, for the others, why they were skipped."""
    loaded, skipped = {}, {}
    for name in dict.fromkeys(names):
        try:
            loaded[name] = bk.get(name)
        except bk.BackendUnavailable as exc:
            skipped[name] = str(exc)
    return loaded, skipped


def _check_only(only: set[str] | None) -> None:
    bad = sorted((only or set()) - set(ROUTINES) - set(BACKENDS))
    if bad:
        raise ProbeError(f"--only: unknown routine or backend {bad} "
                         f"(routines: {', '.join(ROUTINES)}; backends: {', '.join(BACKENDS)})")


def _start(path: Path, profile: Profile, resume: bool) -> tuple[Database, str, set]:
    """The database to extend, this run's id, and the keys already done (for --resume)."""
    try:
        db = load(path)
    except DatabaseMissing:
        if resume:
            raise ProbeError(f"--resume: no database at {path} to resume") from None
        return Database(), uuid.uuid4().hex[:16], set()
    except DatabaseError as exc:
        if resume:
            raise ProbeError(f"--resume: cannot resume, {exc}") from exc
        print(f"autotune-install: replacing unusable database ({exc})", file=sys.stderr)
        return Database(), uuid.uuid4().hex[:16], set()
    if not resume:
        return db, uuid.uuid4().hex[:16], set()
    run = db.run
    if run.get("complete", True) or run.get("profile") != profile.name:
        raise ProbeError(f"--resume: {path} holds no interrupted run of profile {profile.name!r} "
                         f"(last run: {run.get('profile')!r}, complete={run.get('complete', True)})")
    return db, run["run_id"], db.keys(run["run_id"])


def nothing_to_measure(profile: Profile, backends: dict, skipped: dict[str, str], only: set[str] | None) -> str:
    """Why ``profile`` (filtered by ``only``) plans no point on the ``backends`` that loaded."""
    wanted = sorted((only or set()) & set(BACKENDS)) or sorted(set(backends) | set(skipped))
    gone = [f"{b} ({skipped[b]})" for b in wanted if b in skipped]
    if gone and not set(wanted) & set(backends):
        return f"backend{'s' * (len(gone) > 1)} unavailable: {'; '.join(gone)}"
    absent = [b for b in wanted if b not in backends and b not in skipped]
    if absent:
        return f"profile {profile.name!r} does not use backend{'s' * (len(absent) > 1)} {', '.join(absent)}"
    asked = f" with --only {' '.join(sorted(only))}" if only else ""
    return f"profile {profile.name!r}{asked} selects no routine that the available backends ({', '.join(backends)}) run"


def _row(task: Task, sample, t_call: float, run_id: str, ref: float = 0.0) -> tuple:
    fl = task.flops
    work = max(sample.median - t_call, 0.5 * sample.median)  # never let noise make k vanish
    return (task.routine, task.backend, task.threads, task.dtype, task.pattern, task.param, task.x, fl,
            sample.median, sample.minimum, sample.q1, sample.q3, sample.reps, t_call, work / fl, run_id, ref,
            sample.t_wall, sample.t_cpu, sample.cpu_share, sample.noise)


def _noisy(row: tuple) -> bool:
    return bool(row[FIELD["noise"]] & NOISY)


def kept_row(rows: list[tuple]) -> tuple:
    """What a point measured several times keeps: the lower-median of its quiet measurements (marked
    NOISE_RETRIED if a noisy one was dropped), or of all of them if none was quiet (kept noisy)."""
    quiet = [r for r in rows if not _noisy(r)]
    kept = lower_median(quiet or rows, key=lambda r: r[FIELD["t_median"]])
    if quiet and len(quiet) < len(rows):
        i = FIELD["noise"]
        kept = kept[:i] + (kept[i] | NOISE_RETRIED,) + kept[i + 1:]
    return kept


class DriftReference:
    """Re-times a fixed gemm on the current backend every INTERVAL seconds (see drift_corrected_k)."""

    INTERVAL = 2.0
    SIZE = 384
    REPS = 5

    def __init__(self, rng):
        self.rng, self.calls, self.last = rng, {}, {}

    def value(self, be, threads: int) -> float:
        """Median time of the reference call, re-measured when the last one is older than INTERVAL."""
        key = (be.name, threads)
        now = time.perf_counter()
        if key not in self.last or now - self.last[key][0] > self.INTERVAL:
            if key not in self.calls:
                self.calls[key] = operands.build(be, "gemm", "square", self.SIZE, 0.0, self.rng)
            call = self.calls[key]
            call.run(1)
            times = []
            for _ in range(self.REPS):
                t0 = time.perf_counter()
                call.run(1)
                times.append(time.perf_counter() - t0)
            self.last[key] = (time.perf_counter(), float(np.median(times)))
        return self.last[key][1]


def call_overhead(be, routine: str, timing, rng) -> float:
    """Fixed cost of one call (Python dispatch, argument checks, library entry) on 1x1 operands."""
    return measure(build(be, routine, "square", 1, 0.0, rng), timing).median


def run_probe(profile: Profile, db_path=None, *, only: set[str] | None = None, resume: bool = False,
              progress: bool | None = None, seed: int = 0, after: tuple[str, ...] = (),
              completing: Callable[[], None] | None = None) -> ProbeResult:
    """Measure ``profile`` into the database at ``db_path``; a Ctrl-C leaves a valid, resumable file.
    ProbeError, with the database untouched, when the plan holds no point (e.g. --only names an
    unavailable backend): an empty run would leave tuned calls silently untuned.

    ``timing.passes`` passes: every point once, then the cheap ones (median < ``repass_seconds``)
    again, in alternately reversed order; each point keeps the lower median of its passes (the
    faster of two, the middle of three). A machine's speed can wander by several percent over
    seconds to minutes; a point timed at a few moments spread over the run is less at the mercy of
    one of them, so two runs agree better. Then the points still noisy (``autotune.db.noise``: short
    of CPU, or a wide spread) are measured again (``_Session.remeasure``); those that stay noisy are
    kept flagged, and the verdict (``db.noise.verdict``) says so.

    ``after``: the phases that follow the points (pools, thread SPs, validation), stored with the
    run (a resumed run keeps its own); the run is complete once ``finish_phase`` marked each done.
    ``completing`` is called just before the save that marks the run complete (none follows the
    points): the installer stops raising on stop signals there. ``progress``: see ``progress_mode``.
    """
    _check_only(only)
    path = resolve(db_path)
    names = list(profile.backends) + [b for m in profile.measures for b in (m.backends or ())]
    backends, skipped = load_backends(names)
    db, run_id, done = _start(path, profile, resume)
    db.backends.update({n: b.info for n, b in backends.items()})
    pending = tuple(db.run.get("pending", after)) if resume else tuple(after)
    db.run = {"profile": profile.name, "run_id": run_id, "complete": False, "started": time.time(),
              "pending": ["points", *(p for p in pending if p != "points")]}
    tasks = [t for t in expand(profile, backends, only) if t.key not in done]
    if not tasks and not done:           # before the first save: the database stays as it was
        raise ProbeError(f"nothing was measured: {nothing_to_measure(profile, backends, skipped, only)}; "
                         f"{path} left as it was")
    with Progress("points", progress_mode(progress) if tasks else "off") as bar:     # a resume may have none
        session = _Session(profile, backends, db, path, run_id, bar, seed)
        complete = session.measure_all(tasks, completing)
    if not complete:
        print(f"autotune-install: interrupted; {len(db.keys(run_id))} points kept in {path}. "
              "Run again with --resume to finish.", file=sys.stderr)
        return ProbeResult(path, len(db.keys(run_id)), skipped, False, session.elapsed, session.failures)
    return ProbeResult(path, len(db.keys(run_id)), skipped, True, session.elapsed, session.failures,
                       tuple(db.run["pending"]), verdict(db.records, db.run, path).lines)


def finish_phase(path, phase: str) -> None:
    """Mark ``phase`` of the database's run done (the run is complete when none is left)."""
    db = load(path, check_machine=False)
    _done(db.run, phase)
    save(db, path)


def _done(run: dict, phase: str) -> None:
    run["pending"] = [p for p in run.get("pending", []) if p != phase]
    run["complete"] = not run["pending"]


def _reopen(run: dict, phase: str) -> None:
    """Mark ``phase`` pending again, first (a stop during the save that marked it done)."""
    run["pending"] = [phase, *(p for p in run.get("pending", []) if p != phase)]
    run["complete"] = False


class _Session:
    """One probe run's state: measures task lists, checkpoints every CHECKPOINT_SECONDS."""

    def __init__(self, profile: Profile, backends: dict, db: Database, path: Path, run_id: str, bar, seed: int):
        self.profile, self.backends, self.db, self.path, self.run_id, self.bar = (
            profile, backends, db, path, run_id, bar)
        self.rng = np.random.default_rng(seed)
        self.rows, self.failures, self.overheads, self.passes = [], {}, {}, {}
        self.drift = DriftReference(self.rng)
        self.t0 = self.last = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def checkpoint(self) -> None:
        _checkpoint(self.db, self.rows, self.path)
        self.rows, self.last = [], time.perf_counter()

    def measure_all(self, tasks: list[Task], completing: Callable[[], None] | None) -> bool:
        """Every pass over ``tasks``, then the save marking the points done; False if a stop came
        first (the points then stay pending in the saved file, whatever save it interrupted)."""
        reps = self.profile.timing.min_reps
        self.bar.plan(len(tasks), sum(t.eta_weight(reps) for t in tasks))
        try:
            save(self.db, self.path)
            started = time.perf_counter()
            first = self.run_pass(tasks)
            for i in range(1, self.profile.timing.passes):
                order = reversed(tasks) if i % 2 else iter(tasks)
                again = [t for t in order if first.get(t.key, np.inf) < self.profile.timing.repass_seconds]
                self.bar.phase = f"points (pass {i + 1})"
                self.bar.plan(len(again), sum(t.eta_weight(reps) for t in again))
                self.run_pass(again)
            self.remeasure(tasks, time.perf_counter() - started)
            if completing is not None and self.db.run["pending"] == ["points"]:
                completing()
            _done(self.db.run, "points")
            self.checkpoint()
        except KeyboardInterrupt:
            _reopen(self.db.run, "points")
            self.checkpoint()
            return False
        return True

    def remeasure(self, tasks: list[Task], spent: float) -> None:
        """Up to REMEASURES rounds over the points still noisy, each after the one before, within
        REMEASURE_BUDGET x ``spent`` (the passes' seconds): a point quiet in one keeps that one."""
        deadline = time.perf_counter() + REMEASURE_BUDGET * spent
        reps = self.profile.timing.min_reps
        for i in range(REMEASURES):
            noisy = [t for t in tasks if t.key in self.passes and _noisy(kept_row(self.passes[t.key]))]
            if not noisy or time.perf_counter() >= deadline:
                return
            self.bar.phase = f"points (noisy, again {i + 1})"
            self.bar.plan(len(noisy), sum(t.eta_weight(reps) for t in noisy))
            self.run_pass(noisy, deadline)

    def run_pass(self, tasks: list[Task], deadline: float = np.inf) -> dict[tuple, float]:
        """Measure ``tasks`` once more (those reached before ``deadline``); each point's record becomes
        ``kept_row`` of its measurements so far. Returns key -> this pass's median."""
        medians = {}
        for (name, threads), group in _groups(tasks):
            if time.perf_counter() >= deadline:
                self.bar.step(sum(t.eta_weight(self.profile.timing.min_reps) for t in group), len(group))
                continue
            be = self.backends[name]
            if "warm_up" in be.extra:
                be.extra["warm_up"]()
            with be.threads(threads):
                for task in group:
                    self.bar.at(f"{name} t={threads} {task.routine}/{task.pattern} {task.x}")
                    row = self._measure(be, task) if time.perf_counter() < deadline else None
                    if row is not None:
                        medians[task.key] = row[FIELD["t_median"]]
                        self.rows.append(self._kept(task.key, row))
                    self.bar.step(task.eta_weight(self.profile.timing.min_reps))
                    if time.perf_counter() - self.last > CHECKPOINT_SECONDS:
                        self.checkpoint()
            if threads > 1:
                time.sleep(SETTLE_SECONDS)
        return medians

    def _kept(self, key: tuple, row: tuple) -> tuple:
        """The record this point keeps of its measurements so far (``kept_row``)."""
        rows = self.passes.setdefault(key, [])
        rows.append(row)
        return kept_row(rows)

    def _measure(self, be, task: Task) -> tuple | None:
        """One point's record, or None (failure recorded) if the routine raised."""
        try:
            call = build(be, task.routine, task.pattern, task.x, task.param, self.rng)
            key = (be.name, task.threads, task.routine)
            if key not in self.overheads:
                self.overheads[key] = call_overhead(be, task.routine, self.profile.timing, self.rng)
            # Python dispatch is in the timing only when calls were not looped natively.
            in_timing = not call.whole and (call.restore is not None or not be.native_repeat)
            t_call = self.overheads[key] if in_timing else 0.0
            ref = self.drift.value(be, task.threads) if be.supports("gemm") else 0.0
            return _row(task, measure(call, self.profile.timing), t_call, self.run_id, ref)
        except Exception as exc:  # a broken routine must not cost the rest of the run
            self.failures[task.key] = f"{type(exc).__name__}: {exc}"
            return None


def _checkpoint(db: Database, rows: list, path: Path) -> None:
    if rows:
        db.merge(np.array(rows, dtype=RECORD_DTYPE))
    save(db, path)


def _groups(tasks: list[Task]):
    """Consecutive tasks sharing (backend, threads)."""
    from itertools import groupby

    for key, group in groupby(tasks, key=lambda t: (t.backend, t.threads)):
        yield key, list(group)


# -- progress ---------------------------------------------------------------------------------------

def progress_mode(progress: bool | None = None, file=None) -> str:
    """How a phase shows its progress on ``file`` (stderr): "bar" on a terminal (or if ``progress``
    is True), "lines" elsewhere (a log or a pipe: one line as the phase starts), "off" if False."""
    if progress is False:
        return "off"
    file = sys.stderr if file is None else file
    return "bar" if progress or _isatty(file) else "lines"


def _isatty(file) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def terminal_size(file) -> tuple[int, int]:
    """(columns for the bar, rows) of the terminal at ``file``: a terminal reporting 0 x 0 (a
    container's, a serial console) gets FALLBACK_TERMINAL, where tqdm would hide its bar."""
    try:
        cols, rows = os.get_terminal_size(file.fileno())
    except (AttributeError, ValueError, OSError):
        cols, rows = 0, 0
    return (cols if cols > 0 else FALLBACK_TERMINAL[0]) - 1, rows if rows > 0 else FALLBACK_TERMINAL[1]


class Progress:
    """One install phase's progress on stderr. "bar": a tqdm bar with the phase, its points done of
    planned, the time elapsed and left (from each point's guessed seconds), and the point measured
    now, redrawn every REDRAW_SECONDS; "lines": one line as the phase starts; "off": nothing.

    Also callable as ``progress(done, total, what)`` (every point weighing the same), the form in
    which the pool, thread-SP and validation probes report as they start each point."""

    def __init__(self, phase: str, mode: str = "lines", unit: str = "points"):
        self.phase, self.mode, self.unit = phase, mode, unit
        self.done = self.total = 0
        self.started = False
        self.bar = None
        self._closed = threading.Event()
        self._redrawer: threading.Thread | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def plan(self, points: int, seconds: float | None = None) -> None:
        """``points`` more to measure, guessed at ``seconds`` together (default one each); the
        first call starts the display."""
        weight = float(points if seconds is None else seconds)
        self.total += points
        if self.mode == "lines" and not self.started:
            print(f"autotune-install: {self.phase}: {points} {self.unit}", file=sys.stderr, flush=True)
        elif self.mode == "bar":
            if self.bar is None:
                self._open(weight)
            else:
                self.bar.total += weight
            self.bar.set_description_str(self._label(), refresh=False)
        self.started = True

    def at(self, what: str) -> None:
        """Name the point being measured now (beside the bar, as much as fits)."""
        if self.bar is not None:
            room = self.bar.ncols - len(self._label()) - BAR_FIXED - MIN_BAR
            self.bar.set_postfix_str(what[:room] if room >= 10 else "", refresh=False)

    def step(self, seconds: float = 1.0, points: int = 1) -> None:
        """``points`` planned points done, guessed at ``seconds``."""
        self.done += points
        if self.bar is not None:
            self.bar.set_description_str(self._label(), refresh=False)
            self.bar.update(seconds)

    def __call__(self, done: int, total: int, what: str = "") -> None:
        if total != self.total:             # fewer: points a deadline left untimed
            self.plan(total - self.total)
        self.at(what)
        if done > self.done:
            self.step(done - self.done, done - self.done)

    def note(self, message: str) -> None:
        """A message line during the phase (above the bar on a terminal)."""
        if self.mode == "off":
            return
        line = f"autotune-install: {self.phase}: {message}"
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """End the display: the bar's last state stays on its line."""
        self._closed.set()
        if self._redrawer is not None:
            self._redrawer.join()
            self._redrawer = None
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()
            self.bar = None

    def _label(self) -> str:
        return f"{self.phase} {self.done}/{self.total}"

    def _open(self, total: float) -> None:
        from tqdm import tqdm

        cols, rows = terminal_size(sys.stderr)
        self.bar = tqdm(total=total, file=sys.stderr, ncols=cols, nrows=rows, desc=self._label(),
                        bar_format=BAR_FORMAT, mininterval=0.2, leave=True)
        self._redrawer = threading.Thread(target=self._redraw, name="autotune-progress", daemon=True)
        self._redrawer.start()

    def _redraw(self) -> None:
        """Keep the elapsed time moving while one point runs long (a large size, a thread-SP step)."""
        while not self._closed.wait(REDRAW_SECONDS):
            bar = self.bar
            if bar is not None:
                bar.refresh()

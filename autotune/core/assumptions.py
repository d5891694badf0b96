"""Every constant that stands in for a measurement, in one place, with what it means, how its value
was obtained and which correction step (``select.corrections``) or model uses it.

A value here is a guess the probe does not (yet) replace; the modules that use one import it from
here (their old names stay importable there). ``ASSUMPTIONS`` lists them all for ``explain`` and tests.
"""
from __future__ import annotations

from dataclasses import dataclass

SET_BY_HAND = "set by hand"


@dataclass(frozen=True)
class Assumption:
    """One stand-in constant: its value, meaning, origin and user."""

    name: str
    value: object
    meaning: str
    source: str        # how the value was obtained
    used_by: str       # the correction step or model that reads it


ASSUMPTIONS: dict[str, Assumption] = {}


def _assume(name: str, value, meaning: str, source: str, used_by: str):
    """Register ``name`` and return its value (so the module constant and the registry agree)."""
    ASSUMPTIONS[name] = Assumption(name, value, meaning, source, used_by)
    return value


# -- selection charges (select/rank.py) --------------------------------------------------------------

COMPOSED_RISK = _assume(
    "COMPOSED_RISK", {"blocked": 1.10, "gemv": 1.25, "axpy": 1.25, "strassen": 1.10, "strassen_nested": 1.10,
                      "getrf_blocked": 1.10},
    "hedge on composed models (sums of separately measured calls), relative to the family's library routine",
    SET_BY_HAND + "; prior until validation (autotune-install --validate) measures the risk",
    "correction step 'risk' (select/rank.py)")
INCUMBENT_MARGIN = _assume(
    "INCUMBENT_MARGIN", 0.10,
    "fraction by which an alternative must be predicted faster than the library default to replace it",
    SET_BY_HAND + " (about the run-to-run difference of two standard probe runs)",
    "final choice rule (select/rank.py _apply_margin)")
NOISY_MARGIN = _assume(
    "NOISY_MARGIN", 1.0,
    "margin added, times the share of a series' points kept noisy by the probe, to what an alternative must be "
    "predicted faster than the reference by (a series measured all noisy must be predicted twice as fast)",
    SET_BY_HAND + " (a busy probe measured rates 4-16x off the quiet ones here; issue 61)",
    "final choice rule (select/rank.py _margin)")
FLOOR_SLACK = _assume(
    "FLOOR_SLACK", 0.8,
    "slack on the lower bound total flops x fastest k used to prune candidate groups",
    SET_BY_HAND, "pruning in select/rank.py (_floor)")

# -- memory traffic in the models (models/movement.py, models/cholesky.py) ---------------------------

COPY_SHARE = _assume(
    "COPY_SHARE", 2.0 / 3.0,
    "cost of a copy as a share of an add pass: 16 B moved per element against the add's 24 B",
    "derived from bytes moved (not measured)", "models/movement.py copy")
READ_SHARE = _assume(
    "READ_SHARE", 0.42,
    "cost of reading a matrix the caches no longer hold, as a share of the add series' out-of-cache rate",
    SET_BY_HAND + " from validation runs", "models/movement.py cold reads (finite check)")
FILL_SHARE = _assume(
    "FILL_SHARE", 0.9,
    "cost of zeroing memory the caches no longer hold, as a share of the add series' out-of-cache rate",
    SET_BY_HAND, "models/movement.py fill")
LOOP_SHARE = _assume(
    "LOOP_SHARE", 0.6,
    "cost per element of a panel moved inside a distributed loop while other ranks update, as a share "
    "of an out-of-cache pass",
    "prior until the comm probe calibrates cp.loop_share", "models/movement.py in_loop (distributed Cholesky)")
MEMORY_SHARE = _assume(
    "MEMORY_SHARE", 1.0 / 3.0,
    "share of an add pass per trailing element a right-looking b-wide update pays for streaming the "
    "trailing triangle",
    SET_BY_HAND + " to fit distributed Cholesky validation runs", "models/cholesky.py, models/distributed_cholesky.py")

__all__ = ["ASSUMPTIONS", "COMPOSED_RISK", "COPY_SHARE", "FILL_SHARE", "FLOOR_SLACK", "INCUMBENT_MARGIN",
           "LOOP_SHARE", "MEMORY_SHARE", "NOISY_MARGIN", "READ_SHARE", "Assumption"]

# -- tuned calls in one process (autotune/entry/) ----------------------------------------

MIN_TUNED_SIZE = _assume(
    "MIN_TUNED_SIZE", 32,
    "smallest order a tuned call selects for; below it numpy/scipy's own call runs (call overhead dominates)",
    SET_BY_HAND + " to the smallest order the probe profiles measure (configs/*.yaml)",
    "entry/gemm.py, entry/cholesky.py, entry/lu.py")
ALIGNED_OUTPUT_WORK = _assume(
    "ALIGNED_OUTPUT_WORK", 128 ** 3,
    "m*n*k from which numpy's own multi-threaded gemm writes into a cache-line-aligned output (an "
    "unaligned output slows multi-threaded dgemm; below it the extra allocation costs more than it saves)",
    SET_BY_HAND, "entry/gemm.py")

GUARD_ROUNDS = _assume(
    "GUARD_ROUNDS", 2,
    "calls of the choice and of the reference call, run in turn, the run-time guard times per key before it "
    "keeps the choice (its best time strictly under the reference's best) or demotes it",
    SET_BY_HAND + " (two: the best of two drops a first call's one-time costs; every call computes the "
    "user's result, so the trial adds no work)", "guard.py")
GUARD_SECONDS = _assume(
    "GUARD_SECONDS", 0.002,
    "seconds of timed calls each side of a guard trial needs beyond its GUARD_ROUNDS before a verdict "
    "(a 0.1 ms call: 20 of each), so that a small call's verdict is not two samples of scheduler noise",
    SET_BY_HAND + " (measured: LU at n = 100 after scipy's pool ran chose a blocked driver that ran 1.6-1.9x "
    "scipy's call in some processes; two calls each did not demote it)", "guard.py")
GUARD_MAX_ROUNDS = _assume(
    "GUARD_MAX_ROUNDS", 64,
    "calls of each side after which a guard trial ends whatever its seconds (tiny calls)",
    SET_BY_HAND, "guard.py")
GUARD_CLASS_STEPS = _assume(
    "GUARD_CLASS_STEPS", 2,
    "size classes per octave of each dimension the run-time guard keys on (2: orders within a factor "
    "sqrt 2 share a verdict, times compared per flop)",
    SET_BY_HAND, "guard.py key")
CACHE_ENTRIES = _assume(
    "CACHE_ENTRIES", 4096,
    "decisions a bounded cache holds before it is emptied (a miss costs one ranking)",
    SET_BY_HAND, "core/cache.py BoundedCache: select/ranking.py choose, entry/protocol.py plans")

# -- distributed buffers (distributed/workspace.py) ---------------------------------------------------

HUGE_PAGE = _assume(
    "HUGE_PAGE", 2 << 20,
    "bytes of a transparent huge page, the alignment and granule of the huge-page buffers",
    "x86-64's transparent huge page size (not read from the system)", "distributed/workspace.py huge_empty")
HUGE_ADVISE_BYTES = _assume(
    "HUGE_ADVISE_BYTES", 4 << 20,
    "smallest new block of the C front's block cache advised to huge pages (MADV_HUGEPAGE)",
    "numpy's own threshold for advising its allocations (numpy/_core/src/multiarray/alloc.c)",
    "kernels/_front.pyx _take")
HUGE_MIN_BYTES = _assume(
    "HUGE_MIN_BYTES", 16 << 10,
    "smallest reused buffer backed by huge pages (the shared-memory transport copies once from 4 KiB up)",
    SET_BY_HAND, "distributed/workspace.py empty; install_probe comm buffers")
WORKSPACE_SHARE = _assume(
    "WORKSPACE_SHARE", 1 / 8,
    "share of physical memory the reused distributed buffers of a thread may hold when "
    "options(workspace_bytes=) is unset",
    SET_BY_HAND, "distributed/workspace.py limit_bytes")
WORKSPACE_FALLBACK_BYTES = _assume(
    "WORKSPACE_FALLBACK_BYTES", 1 << 30,
    "the reused buffers' limit where the physical memory cannot be read (non-POSIX)",
    SET_BY_HAND, "distributed/workspace.py limit_bytes")

__all__ += ["ALIGNED_OUTPUT_WORK", "GUARD_CLASS_STEPS", "GUARD_MAX_ROUNDS", "GUARD_ROUNDS", "GUARD_SECONDS",
            "CACHE_ENTRIES", "HUGE_ADVISE_BYTES", "HUGE_MIN_BYTES", "HUGE_PAGE", "MIN_TUNED_SIZE",
            "WORKSPACE_FALLBACK_BYTES", "WORKSPACE_SHARE"]

# -- defaults where nothing was measured, and lookup policies (db/lookup.py, db/comm.py) --------------

EXTRAPOLATION_PENALTY = _assume(
    "EXTRAPOLATION_PENALTY", 0.25,
    "k read past a series' measured sizes is its nearest measured value times (1 + this) per octave "
    "beyond them (a series measured to 512 pays 1.56x at 2048, one measured to 1024 pays 1.25x)",
    SET_BY_HAND + " (so an unmeasured size ranks behind a measured one of the same rate, the further "
    "out the more)",
    "db/lookup.py SPTable.k; explain marks every such k")

DEFAULT_RATE = _assume(
    "DEFAULT_RATE", {3: 20e9, 2: 2e9, 1: 1e9},
    "nominal per-thread rates (flop/s) by BLAS level, used only when the database measured nothing",
    SET_BY_HAND + " (a 2020s server core's order of magnitude)", "db/lookup.py k defaults")
DRIFT_PERCENTILE = _assume(
    "DRIFT_PERCENTILE", 10,
    "the low percentile of a reference series that drift correction normalises to (the machine at its "
    "least disturbed, robust to the reference's own timing noise)", SET_BY_HAND, "db/lookup.py drift correction")
MAX_DRIFT_CORRECTION = _assume(
    "MAX_DRIFT_CORRECTION", 1.15,
    "largest drift correction either way: a reference re-timed inside a short burst says little about a "
    "point measured seconds away, and uncapped it can push a k past the core's peak",
    SET_BY_HAND, "db/lookup.py drift correction")
RECHECK_SECONDS = _assume(
    "RECHECK_SECONDS", 1.0,
    "how often (seconds) a tuned call re-checks the database file's modification time",
    SET_BY_HAND + " (a stat per second is free; a rewritten database is seen within it)", "db/lookup.py load_sp")
DEFAULT_TS = _assume(
    "DEFAULT_TS", 2e-6, "message start-up time (seconds) where the comm probe measured no platform",
    SET_BY_HAND + " (shared-memory MPI's order of magnitude)", "db/comm.py CommParams defaults")
DEFAULT_TW = _assume(
    "DEFAULT_TW", 1e-10, "seconds per byte (10 GB/s) where the comm probe measured no platform",
    SET_BY_HAND + " (shared-memory MPI's order of magnitude)", "db/comm.py CommParams defaults")
DEFAULT_FIRST_TOUCH = _assume(
    "DEFAULT_FIRST_TOUCH", 5e-11,
    "seconds per byte of fresh memory written the first time (page faults) where not measured",
    SET_BY_HAND, "db/comm.py CommParams.first_touch")
DEFAULT_COMPUTE_SKEW = _assume(
    "DEFAULT_COMPUTE_SKEW", 0.01,
    "slowest minus fastest of P ranks doing the same update, over its time, where not measured",
    SET_BY_HAND, "db/comm.py CommParams.compute_skew")

UNMEASURED_OVERLAP = _assume(
    "UNMEASURED_OVERLAP", {"host": (0.0, 0.0), "net": (1.0, 0.0)},
    "per link kind, (share of a message's time that hides behind compute, seconds of CPU overlapping "
    "it costs) where the comm probe measured no overlap series: copies within a host do not hide, "
    "network messages hide whole and cost no CPU",
    "004 §3.2.2 (in-node messages cannot overlap: the CPU moves them)", "db/comm_lookup.py CommParams.overlap")

__all__ += ["DEFAULT_COMPUTE_SKEW", "DEFAULT_FIRST_TOUCH", "DEFAULT_RATE", "DEFAULT_TS", "DEFAULT_TW",
            "DRIFT_PERCENTILE", "EXTRAPOLATION_PENALTY", "MAX_DRIFT_CORRECTION", "RECHECK_SECONDS",
            "UNMEASURED_OVERLAP"]

# -- stencils (models/stencil.py) ---------------------------------------------------------------------

HALO_REQUEST = _assume(
    "HALO_REQUEST", 3e-6,
    "seconds to start and complete one persistent halo request (Startall/Waitall share per message) "
    "beyond its (ts, tw), what an overlapped schedule cannot hide",
    SET_BY_HAND + " (Open MPI's persistent point-to-point, order of magnitude)", "models/stencil.py exchange")
OVERLAP_POLLS = _assume(
    "OVERLAP_POLLS", 1,
    "Testall calls an overlapped interior sweep makes (between row chunks) to progress its messages",
    SET_BY_HAND + " (enough to drive rendezvous messages, few enough to cost nothing)",
    "distributed/stencil.py overlapped schedules")

LOCAL_LEVELS = _assume(
    "LOCAL_LEVELS", 8,
    "steps the wavefront kernel fuses per call when one process sweeps a whole field",
    SET_BY_HAND + " (2048^2 heat field on a 2-core EPYC, one core: 4, 8, 16 levels ran 1.4, 2.1, 1.9 "
    "Gcells/s; 8 levels of a 4096-wide field still fit a 1 MiB L2)", "kernels/stencil.py run_local, models/stencil.py")

__all__ += ["HALO_REQUEST", "LOCAL_LEVELS", "OVERLAP_POLLS"]

# -- load balancing (balance.py) -------------------------------------------------------------------------

OBSERVE_MIN_SECONDS = _assume(
    "OBSERVE_MIN_SECONDS", 0.02,
    "least compute seconds every working rank of a distributed call must spend for the call's rates "
    "to count as the hosts' speeds (shorter calls measure their per-call overhead)",
    SET_BY_HAND + " (a few CFS periods of a capped host, tens of the calls' Python overhead)",
    "balance.HostSpeeds.observe")

__all__ += ["OBSERVE_MIN_SECONDS"]

# -- synthetic pipelines (workload.py, models/pipeline.py, distributed/pipeline.py) -------------------

PIPELINE_POLL_SECONDS = _assume(
    "PIPELINE_POLL_SECONDS", 1e-3,
    "longest sleep between two polls of a waiting pipeline process (its backoff's cap; the model "
    "charges half of it per message as the receiver's wake-up)",
    SET_BY_HAND + " (16 polling ranks on 2 cores stay under a tenth of a core; a millisecond is a "
    "percent of the scaled cases' 30-100 ms stages)",
    "distributed/pipeline.py waits, models/pipeline.py makespan")

MPI_EAGER_BYTES = _assume(
    "MPI_EAGER_BYTES", 65536,
    "bytes from which a message between hosts waits for its receive to be posted (rendezvous: the "
    "data crosses the link only once the receiver asks)",
    "Open MPI's TCP BTL default (btl_tcp_eager_limit = 64 KiB, its header included)",
    "models/pipeline.py makespan (a manager that takes a task only when a replica is free)")

__all__ += ["MPI_EAGER_BYTES", "PIPELINE_POLL_SECONDS"]


# -- distributed LU (distributed/lu.py, models/distributed_lu.py) -----------------------------------

LU_POLL_BLOCKS = _assume(
    "LU_POLL_BLOCKS", 2,
    "block columns of the distributed LU's trailing update between two polls of its messages (the "
    "gemm runs in strips this wide, and the model prices them so)",
    SET_BY_HAND + " (over TCP a large message moves only while both ranks are inside MPI)",
    "distributed/lu_factorization.py LUFactorization.gemm; models/distributed_lu.py update")

__all__ += ["LU_POLL_BLOCKS"]


# -- fitted T(n, p) of the distributed plans (models/fitted_plans.py) -----------------------------

PLAN_FIT_MAX_APE = _assume(
    "PLAN_FIT_MAX_APE", 20.0,
    "largest held-out median APE (%) of a plan series' fitted T(n, p) that may replace the phase-factor "
    "model: past it the fit is no model of the series, even where the factors are worse",
    SET_BY_HAND + " (001 Tables 4.9 and 4.11 accept deviations up to 15.7%; chosen after the emulated "
    "cluster's runs, where fits at 50-60% held-out error picked plans 1.3-2.4x slower)",
    "select/distributed.py calibration step")

__all__ += ["PLAN_FIT_MAX_APE"]


# -- busy probes (install_probe/timing.py, install_probe/runner.py, db/noise.py) ----------------------

MIN_CPU_SHARE = _assume(
    "MIN_CPU_SHARE", 0.8,
    "least share of the CPU a probed point's threads must get while timed (the lower of the measuring "
    "thread's CPU time over wall time and, where /proc has it, the threads' CPU time over CPU plus "
    "run-queue wait): below it another program took cores and the point is measured again, then kept as noisy",
    "chosen from quick probes on a 2-core VM (965 timings each): quiet, 1st percentile 0.95 at 1 thread and "
    "0.92 at 2 threads, 4 of 965 below 0.8; with both cores kept busy by two shell loops, median 0.99 at 1 "
    "thread (the scheduler often leaves it a core) and 0.48 at 2, and the points kept below 0.8 read a median "
    "1.9x (1 thread) and 2.6x (2 threads) slower than the quiet run; a thread sharing its core with one busy "
    "program gets 0.5, three runnable threads on two cores 0.67",
    "install_probe/runner.py remeasuring; db/noise.py noise_bits and the install's verdict")
MAX_SPREAD = _assume(
    "MAX_SPREAD", 1.0,
    "largest interquartile range of a point's repeats, relative to their median, before the point is measured "
    "again and, if it stays so, kept as noisy",
    "chosen from a quiet quick probe on a 2-core VM: 99th percentile 0.88, 6 of 965 points beyond 1.0 (calls "
    "of 1-3 us timed one per sample, and laswp); with both cores busy 57 of 960",
    "install_probe/runner.py remeasuring; db/noise.py noise_bits")
REMEASURES = _assume(
    "REMEASURES", 2,
    "rounds in which the points still noisy after the probe's passes are measured again (each round after "
    "the one before, so a disturbance of a few seconds spoils one attempt, not all)",
    SET_BY_HAND + " (FFTW's planner and ATLAS repeat a timing that looks disturbed a small number of times)",
    "install_probe/runner.py _Session.remeasure")
REMEASURE_BUDGET = _assume(
    "REMEASURE_BUDGET", 0.5,
    "longest the remeasuring rounds may take, as a share of the passes' time: on a machine that stays busy "
    "measuring again cannot help, and the verdict says so",
    SET_BY_HAND + " (a busy quick install then ends within 1.5x its passes)",
    "install_probe/runner.py _Session.remeasure")

__all__ += ["MAX_SPREAD", "MIN_CPU_SHARE", "REMEASURES", "REMEASURE_BUDGET"]

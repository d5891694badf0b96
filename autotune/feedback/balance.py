"""Dynamic load balancing policy (002): moving averages of each rank's measured rate, weights from
them, when to look again, when to stop, and whether moving the data pays (pure, no MPI).

A rank times its own compute per step and pushes the rate (seconds per cell, 002 eq. 4.4) into a
``MovingAverage`` (002 §3.3: simple, linearly weighted or exponential over a window of W samples;
the window restarts after each redistribution). Every W samples the ranks exchange their averages
(``autotune.distributed.balance`` does it without blocking); ``Balancer.decide`` then turns the
rates into new shares (eq. 4.1, or eq. 4.3's half step) and passes them through the policy: the
interval (fixed W, or growing by W after each redistribution, §4.3.8), the stop rule (shares stable
within ``tol`` for ``stable_windows`` decisions stop it; a rate drifting by more than the noise
restarts it) and the gate: move only if the predicted time saved over the remaining steps, beyond
the rates' own noise, exceeds the predicted cost of moving the data.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from autotune.geometry.layout import largest_remainders

AVERAGES = ("sma", "lwma", "ema")
RECENT_WINDOWS = 8        # pairs of windows the between-window noise is taken over
KNOWN_NOISE = 2           # pairs needed before the first move (the noise must be known to beat it)
MAD_SIGMA = 1.4826        # a normal deviation per median absolute deviation
RULES = ("inverse", "half_step")
INTERVALS = ("fixed", "growing")
TIMINGS = ("compute", "iteration")


class MovingAverage:
    """002's HitAvg: the average of the last ``window`` samples (None until the window is full).

    sma: eq. 3.3; lwma: eq. 3.6 with weights 1..W, oldest to newest; ema: eq. 3.7 with
    k = 2 / (W + 1), seeded with the SMA of the first full window (Table 5.3)."""

    def __init__(self, kind: str = "ema", window: int = 10):
        if kind not in AVERAGES:
            raise ValueError(f"average must be one of {AVERAGES}, got {kind!r}")
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        self.kind, self.window = kind, int(window)
        self.data: deque[float] = deque(maxlen=self.window)
        self.value: float | None = None

    def push(self, x: float) -> float | None:
        self.data.append(float(x))
        if len(self.data) < self.window:
            return None
        d = np.asarray(self.data)
        if self.kind == "sma":
            self.value = float(d.mean())
        elif self.kind == "lwma":
            w = np.arange(1, self.window + 1, dtype=float)
            self.value = float(w @ d / w.sum())
        else:
            k = 2.0 / (self.window + 1)
            prev = float(d.mean()) if self.value is None else self.value
            self.value = float(d[-1] * k + prev * (1 - k))
        return self.value

    @property
    def spread(self) -> float:
        """Relative standard deviation of the samples in the window (0 with fewer than two)."""
        d = np.asarray(self.data)
        return float(d.std() / d.mean()) if d.size > 1 and d.mean() > 0 else 0.0

    def reset(self) -> None:
        self.data.clear()
        self.value = None


def moving_averages(kind: str, series, window: int) -> list[float | None]:
    """The average after each value of ``series`` (None while the window fills)."""
    avg = MovingAverage(kind, window)
    return [avg.push(x) for x in series]


def weights(times, rule: str = "inverse") -> np.ndarray:
    """Each rank's share from its time (per cell): eq. 4.1 w = Σt / t, or eq. 4.3's half step
    w = Σt / ((t - mean)/2 + mean). A rank reporting 0 (no work, 002 §4.3.3) gets weight 0."""
    t = np.asarray(times, float)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    active = t > 0
    if not active.any():
        return np.ones_like(t)
    ta = t[active]
    den = ta if rule == "inverse" else (ta - ta.mean()) / 2 + ta.mean()
    out = np.zeros_like(t)
    out[active] = ta.sum() / den
    return out


def shares(n: int, w, minimum: int = 1) -> np.ndarray:
    """``n`` indices split in proportion to ``w``, each part at least ``minimum`` (largest remainders)."""
    w = np.asarray(w, float)
    if n < minimum * w.size:
        raise ValueError(f"{n} indices cannot give {w.size} parts {minimum} each")
    fixed = np.zeros(w.size, bool)
    while True:
        rest = n - minimum * fixed.sum()
        free = w * ~fixed
        exact = np.where(fixed, minimum, rest * free / free.sum() if free.sum() > 0 else rest / (~fixed).sum())
        low = ~fixed & (exact < minimum)
        if not low.any():
            return largest_remainders(exact, n)
        fixed |= low


def step_time(rates, rows, cols) -> float:
    """Predicted compute time of a step on an r x c grid: the slowest tile's cells x its rate."""
    r = np.asarray(rates, float).reshape(len(rows), len(cols))
    return float((np.outer(rows, cols) * r).max())




@dataclass(frozen=True)
class Policy:
    """How a run balances itself (``balance=`` of ``autotune.stencil``)."""

    average: str = "ema"
    window: int = 10
    interval: str = "growing"
    rule: str = "inverse"
    timing: str = "compute"       # "iteration": whole-step times (002 §4.3.5's failure, for comparison)
    tol: float = 0.05             # relative change of shares or rates treated as no change
    stable_windows: int = 3
    gate: bool = True
    confidence: float = 2.0       # standard errors of the averages a difference must exceed to count

    def __post_init__(self):
        MovingAverage(self.average, self.window)
        for name, value, allowed in (("rule", self.rule, RULES), ("interval", self.interval, INTERVALS),
                                     ("timing", self.timing, TIMINGS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if not 0 <= self.tol < 1 or self.stable_windows < 1 or self.confidence < 0:
            raise ValueError(f"tol must be in [0, 1), stable_windows >= 1 and confidence >= 0, got {self.tol}, "
                             f"{self.stable_windows}, {self.confidence}")

    def noise(self, spread: float) -> float:
        """Relative change noise explains in an average of a window whose samples spread by
        ``spread``: ``tol``, or ``confidence`` standard errors (spread / sqrt(W))."""
        return max(self.tol, self.confidence * spread / np.sqrt(self.window))


def policy_of(balance) -> Policy | None:
    """``balance=`` as a Policy: None/False off, True the default, an average's name, or a Policy."""
    if balance is None or balance is False:
        return None
    if balance is True:
        return Policy()
    if isinstance(balance, str) and balance in AVERAGES:
        return Policy(average=balance)
    if isinstance(balance, Policy):
        return balance
    raise ValueError(f"balance must be None, a bool, one of {AVERAGES} or a balance.Policy, got {balance!r}")


@dataclass(frozen=True)
class Rebalance:
    """One look at the ranks' rates: the new shares (None: keep the layout) and why."""

    rows: np.ndarray | None
    cols: np.ndarray | None
    reason: str
    now: float = 0.0          # predicted compute seconds per step, current layout
    new: float = 0.0          # ... with the proposed shares
    gain: float = 0.0         # predicted seconds saved over the remaining steps
    cost: float = 0.0         # predicted seconds to move the data

    @property
    def move(self) -> bool:
        return self.rows is not None


@dataclass
class Balancer:
    """A run's balancing state: this rank's own average (``sample``), and the decision state, the
    same on every rank (all decide from the same exchanged averages)."""

    policy: Policy
    minimum: int = 1                       # fewest rows / columns a part may keep (the halo width)
    rebalances: int = 0
    since: int = 0                         # samples since the last redistribution
    stable: int = 0
    stopped: bool = False
    seen: np.ndarray | None = None         # rates at the last decision (drift reference)
    last: np.ndarray | None = None         # the previous window's rates, on the current shares
    jitter: list = field(default_factory=list)   # relative change between such windows, whole run

    def __post_init__(self):
        self.avg = MovingAverage(self.policy.average, self.policy.window)

    def sample(self, seconds_per_cell: float) -> bool:
        """Push this rank's rate; True when the ranks should exchange averages (every W samples)."""
        self.avg.push(seconds_per_cell)
        self.since += 1
        return self.avg.value is not None and self.since % self.policy.window == 0

    def mine(self) -> tuple[float, float]:
        """(this rank's average rate, its window's relative spread) to exchange."""
        return float(self.avg.value or 0.0), self.avg.spread

    def interval(self) -> int:
        w = self.policy.window
        return w * (self.rebalances + 1) if self.policy.interval == "growing" else w

    def decide(self, rates, spreads, rows, cols, remaining: int, move_cost) -> Rebalance:
        """The ranks' averages (per cell, row-major over the grid) -> a Decision; ``move_cost(rows,
        cols)`` prices moving to the proposed shares."""
        rates = np.asarray(rates, float)
        rows, cols = np.asarray(rows), np.asarray(cols)
        noise = self.noise(spreads)
        if self.last is not None:     # two windows on the same shares: how much the averages wander
            self.jitter.append(float(np.max(np.abs(rates / self.last - 1))))
        self.last = rates
        drift = self.seen is not None and bool(np.any(np.abs(rates / self.seen - 1) > noise))
        if drift:
            self.stopped, self.stable = False, 0
        if not drift and (self.stopped or self.since < self.interval()):
            return Rebalance(None, None, "stopped: shares stable" if self.stopped else "interval not due")
        self.seen = rates
        speed = weights(rates, self.policy.rule).reshape(len(rows), len(cols))
        new_rows = shares(int(rows.sum()), speed.sum(axis=1), self.minimum)
        new_cols = shares(int(cols.sum()), speed.sum(axis=0), self.minimum)
        now, new = step_time(rates, rows, cols), step_time(rates, new_rows, new_cols)
        changed = max(np.abs(new_rows - rows).max() / rows.max(), np.abs(new_cols - cols).max() / cols.max())
        if len(self.jitter) < KNOWN_NOISE:
            return Rebalance(None, None, "measuring the noise", now, new)
        if changed <= self.policy.tol or now <= new * (1 + noise):
            self.stable += 1
            self.stopped = self.stable >= self.policy.stable_windows
            return Rebalance(None, None, f"balanced within noise {noise:.1%}", now, new)
        self.stable = 0
        gain, cost = remaining * (now - new * (1 + noise)), float(move_cost(new_rows, new_cols))
        if self.policy.gate and gain <= cost:
            return Rebalance(None, None, "gate: gain below the cost of moving", now, new, gain, cost)
        return Rebalance(new_rows, new_cols, "redistribute", now, new, gain, cost)

    def noise(self, spreads) -> float:
        """Relative change of a rate that noise explains: ``tol``, or ``confidence`` standard errors
        of a window's average (its samples' spread / sqrt(W)), or ``confidence`` deviations of a
        window's average from the next on the same shares (from the median of their relative
        differences, over the last ``RECENT_WINDOWS`` pairs of the run, kept across moves: noise
        that lasts longer than a sample, such as a host's quota period or a neighbour's job, shows
        there and not in one window's spread; the median ignores the pair a real change falls in)."""
        within = self.policy.noise(float(np.max(spreads, initial=0.0)))
        recent = self.jitter[-RECENT_WINDOWS:]
        if len(recent) < 2:
            return within
        return max(within, self.policy.confidence * MAD_SIGMA * float(np.median(recent)) / np.sqrt(2))

    def moved(self) -> None:
        """After a redistribution: restart the window (old samples belong to the old shares)."""
        self.rebalances += 1
        self.since = 0
        self.avg.reset()
        self.last = None




__all__ = ["AVERAGES", "Balancer", "MovingAverage", "Policy", "Rebalance", "moving_averages",
           "policy_of", "shares", "step_time", "weights"]

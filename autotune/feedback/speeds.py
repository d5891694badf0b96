"""Host speeds measured at run time: each host's work per busy second in repeated distributed calls,
by communicator, and the comm lookup the planner sees with them (DESIGN §8)."""
from __future__ import annotations

import numpy as np

from autotune.core.assumptions import OBSERVE_MIN_SECONDS
from autotune.core.plans import Plan
from autotune.db.comm_lookup import CommParams
from autotune.feedback.balance import MovingAverage, Policy


class HostSpeeds:
    """Host speeds seen in repeated distributed calls on one set of hosts: each host's work per
    busy second (``distributed.balance.busy``) relative to the root's host, averaged over calls
    with the policy's average and window, and when they replace the probe's speeds (the gate for
    calls whose data the root scatters anyway: the move itself costs nothing extra, so the only
    test is the noise)."""

    def __init__(self, policy: Policy | None = None):
        self.policy = policy or Policy(window=CALL_WINDOW)
        self.avgs: dict[str, MovingAverage] = {}
        self.calls = 0

    def observe(self, samples, root: int) -> None:
        """One call's ``(host, busy seconds, share of the work)`` of every rank (``root``: the
        root's index); ranks that did no work report share 0. Calls where a working rank computed
        for less than ``OBSERVE_MIN_SECONDS`` are not counted."""
        if any(0 < seconds < OBSERVE_MIN_SECONDS for _, seconds, share in samples if share > 0):
            return                    # a short call's time is its overhead, not the hosts' speed
        work: dict[str, float] = {}
        secs: dict[str, float] = {}
        for host, seconds, share in samples:
            if share > 0 and seconds > 0:
                work[host] = work.get(host, 0.0) + share
                secs[host] = secs.get(host, 0.0) + seconds
        base = samples[root][0]
        if base not in work or len(work) < 2:
            return
        ref = work[base] / secs[base]
        for host in work:
            avg = self.avgs.setdefault(host, MovingAverage(self.policy.average, self.policy.window))
            avg.push(work[host] / secs[host] / ref)
        self.calls += 1

    def effective(self, probe: dict[str, float], root_host: str) -> tuple[dict[str, float], str]:
        """The speeds to plan with and where they come from: the probe's, or the run's (in the
        probe's units, scaled at the root's host) where they differ from them by more than noise."""
        hosts = set(self.avgs)
        if root_host not in probe or not hosts or not hosts <= set(probe) \
                or any(self.avgs[h].value is None for h in hosts):
            return probe, "probe"
        seen = {h: probe[root_host] * self.avgs[h].value for h in hosts}
        noise = self.policy.noise(max(a.spread for a in self.avgs.values()))
        if all(abs(seen[h] / probe[h] - 1) <= noise for h in hosts):
            return probe, f"probe (the last {self.policy.window} calls agree within {noise:.0%})"
        return {**probe, **seen}, f"run time ({self.policy.average.upper()} of the last {self.policy.window} calls)"


CALL_WINDOW = 3           # calls averaged per host speed of repeated distributed calls


# Host speeds seen in this process's distributed calls, by the communicator's set of host names
# (the root plans with them: ``speeds_for``).
RUN_SPEEDS: dict[tuple[str, ...], HostSpeeds] = {}



def work_share(plan: Plan, size: int, root: int, rank: int) -> float:
    """``rank``'s share of a plan's work: its weight's share (HoHe) or 1/p, 0 off the plan."""
    used = plan.used_ranks(size, root)
    if rank not in used:
        return 0.0
    w = np.ones(plan.p) if plan.weights is None else np.asarray(plan.weights, float)
    return float(w[used.index(rank)] / w.sum())



def speeds_for(cp: CommParams, names: list[str], root: int):
    """``cp`` as the planner should see it, and where its host speeds come from: the probe's, or a
    view with the speeds the communicator's recent calls measured where they differ (``HostSpeeds``)."""
    seen = RUN_SPEEDS.get(tuple(sorted(set(names))))
    probe = cp.host_speeds
    if seen is None or not probe:
        return cp, "probe"
    speeds, source = seen.effective(probe, names[root])
    return (cp if speeds is probe else cp.with_host_speeds(speeds)), source

"""The hosts' CPU shares: one cgroup v1 CPU controller group per host (``at-h<i>``), capped by a
CFS quota (percent of one core), changed while jobs run (``set_cpu``, also from inside a job,
which sees the cgroups through a bind mount in the state directory)."""
from __future__ import annotations

from pathlib import Path

from .hosts import PREFIX, ArgumentError, Host, TestbedError, check_hosts
from .network import live
from .state import Testbed, saved
from .system import run_tool

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
# Where the state directory shows CGROUP_CPU (a bind mount): a job on an emulated host sees no
# cgroups in its own sysfs, but sees the state directory.
CGROUP_VIEW = "cgroup-cpu"
# CFS period of a host's CPU quota: short, so a capped host is slow evenly, as a slower processor
# is, rather than in bursts (with 100 ms a half-core host runs 50 ms, then answers no message for 50).
PERIOD_US = 5_000


def cgroup_of(h: Host) -> str | None:
    """The host's CPU cgroup (every host has one where cgroup v1 is mounted: ``set_cpu`` may cap it later)."""
    return str(CGROUP_CPU / f"{PREFIX}{h.name}") if CGROUP_CPU.is_dir() else None


def set_quota(cg: str, cpu: int | None) -> None:
    """Cap cgroup ``cg`` at ``cpu`` percent of one core (None: no cap)."""
    Path(cg, "cpu.cfs_period_us").write_text(str(PERIOD_US))
    Path(cg, "cpu.cfs_quota_us").write_text(str(-1 if cpu is None else PERIOD_US * cpu // 100))


def add_cgroup(h: Host) -> None:
    """Host ``h``'s cgroup at its CPU share, where cgroup v1 is mounted."""
    cg = cgroup_of(h)
    if cg:
        Path(cg).mkdir(exist_ok=True)
        set_quota(cg, h.cpu)


def mount_view(workdir: Path) -> None:
    """Show the cgroups in ``workdir`` (``CGROUP_VIEW``), where jobs on the hosts can reach them."""
    if CGROUP_CPU.is_dir():
        (workdir / CGROUP_VIEW).mkdir(exist_ok=True)
        run_tool("mount", "--bind", str(CGROUP_CPU), str(workdir / CGROUP_VIEW))


def unmount_view(workdir: Path) -> bool:
    """Undo ``mount_view`` in ``workdir``; whether the view is gone (never walk the machine's cgroups
    through one still mounted)."""
    if (workdir / CGROUP_VIEW).is_mount():
        run_tool("umount", str(workdir / CGROUP_VIEW), check=False)
    return not (workdir / CGROUP_VIEW).is_mount()


def remove_cgroups() -> None:
    """Every testbed cgroup, its processes killed."""
    if not CGROUP_CPU.is_dir():
        return
    for cg in CGROUP_CPU.glob(f"{PREFIX}*"):
        procs = (cg / "cgroup.procs").read_text().split() if (cg / "cgroup.procs").exists() else []
        for pid in procs:
            run_tool("kill", "-9", pid, check=False)
        try:
            cg.rmdir()
        except OSError:
            pass


def set_cpu(name: str, cpu: int | None, workdir: Path | None = None) -> Testbed:
    """Change host ``name``'s CPU share (percent of one core; None: no cap) while jobs run on it
    (also from inside such a job, e.g. a benchmark changing the load it runs under)."""
    tb = live(workdir) or saved(workdir)       # inside a job the bridge is out of sight: its state file
    if tb is None:
        raise TestbedError("no testbed is up (autotune testbed up)")
    host = next((h for h in tb.hosts if h.name == name), None)
    if host is None:
        raise ArgumentError(f"no host {name!r} (hosts: {', '.join(h.name for h in tb.hosts)})")
    host.cpu = cpu
    check_hosts([host])
    cg = next((p / f"{PREFIX}{name}" for p in (CGROUP_CPU, Path(tb.workdir) / CGROUP_VIEW)
               if (p / f"{PREFIX}{name}").is_dir()), None)
    if cg is None:
        raise TestbedError(f"{name} has no CPU cgroup (cgroup v1 cpu controller at {CGROUP_CPU})")
    set_quota(str(cg), cpu)
    tb.save()
    return tb

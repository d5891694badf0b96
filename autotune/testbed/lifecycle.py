"""Bringing the testbed up and taking it down. ``up`` first clears any leftover of an earlier run
and never replaces a live testbed silently (only with ``replace``, its jobs then stopped); ``down``
removes everything ``up`` made and stops the running jobs."""
from __future__ import annotations

import shutil
from pathlib import Path

from . import cgroups, network
from .hosts import Host, TestbedError, check_hosts
from .job_registry import stop_jobs
from .mpiexec import agent_script
from .state import Testbed, state_dir
from .system import available


def up(hosts: list[Host], workdir: Path | None = None, replace: bool = False) -> Testbed:
    """Build the testbed, its state kept in ``workdir`` (default ``STATE_DIR``), after clearing
    any leftover; a live testbed only with ``replace`` (its jobs then stop), else an error."""
    workdir = state_dir(workdir)
    check_hosts(hosts)
    why = available()
    if why:
        raise TestbedError(why)
    old = network.live(workdir)
    if old is not None and not replace:
        raise TestbedError(f"a testbed is up: {old.describe()}; `autotune testbed up --replace` replaces it "
                           "(stopping its jobs), `autotune testbed down` removes it")
    down(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tb = Testbed(hosts, str(workdir))
    cgroups.mount_view(workdir)           # the hosts' cgroups where jobs on them can reach (set_cpu)
    tb.save()
    network.add_bridge(workdir)
    for h in hosts:
        network.add_host(h)
        cgroups.add_cgroup(h)
    Path(tb.hostfile).write_text("".join(f"{h.name} slots={h.slots}\n" for h in hosts))
    agent = Path(tb.agent)
    agent.write_text(agent_script(tb))
    agent.chmod(0o755)
    return tb


def down(workdir: Path | None = None) -> list[dict]:
    """Remove what ``up`` made: namespaces, links, bridge, cgroups, the state directory (``workdir``'s
    and the live testbed's); stop its running jobs, which are returned."""
    owner = network.owner()
    dirs = {state_dir(workdir), *([owner] if owner and (owner / "state.json").exists() else [])}
    stopped = [job for d in dirs for job in stop_jobs(d)]
    network.remove_all()
    cgroups.remove_cgroups()
    for d in dirs:
        if cgroups.unmount_view(d):       # never walk the machine's cgroups
            shutil.rmtree(d, ignore_errors=True)
    return stopped

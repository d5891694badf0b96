"""Launching MPI jobs on the testbed: the agent ``mpiexec`` calls as it would call ssh (it joins the
host's cgroup, then enters its namespace with its own UTS namespace and hostname: one shared
hostname makes the TCP transport hang), the ``mpiexec`` command line, and ``run_job``, which runs
one registered so that ``down`` can stop it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .cgroups import cgroup_of
from .hosts import TestbedError
from .job_registry import register
from .state import Testbed, instance_of


def agent_script(tb: Testbed) -> str:
    """The agent's shell script: ``agent [ssh options] HOST COMMAND...`` runs COMMAND on HOST."""
    table = "\n".join(f"  {h.name}) ns={h.ns}; cg={cgroup_of(h) or ''} ;;" for h in tb.hosts)
    return f"""#!/bin/sh
# ssh stand-in for mpiexec: agent [ssh options] HOST COMMAND... runs COMMAND on the emulated HOST
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
{table}
  *) echo "testbed agent: unknown host $host" >&2; exit 255 ;;
esac
# join the host's CPU cgroup here: inside the namespace, ip netns exec mounts a sysfs without cgroups
[ -n "$cg" ] && echo $$ > "$cg/cgroup.procs"
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1"; shift; exec sh -c "$*"' agent "$host" "$@"
"""


def mpiexec_command(tb: Testbed, np_: int, argv: list[str], mpiexec: str | None = None) -> list[str]:
    """``mpiexec -n np_`` with the testbed's options, then ``argv``."""
    exe = mpiexec or str(Path(sys.executable).parent / "mpiexec")
    return [exe, "-n", str(np_), *tb.mpiexec_args(), *argv]


def run_job(tb: Testbed, np_: int, argv: list[str], mpiexec: str | None = None, **popen) -> int:
    """Run ``argv`` on ``np_`` ranks of ``tb``, registered so ``down`` can stop it; its launcher's
    exit status, or a TestbedError if the testbed was taken down meanwhile (the launcher may exit 0)."""
    proc = subprocess.Popen(mpiexec_command(tb, np_, argv, mpiexec), **popen)
    me = tb.jobs_dir / f"{os.getpid()}-{proc.pid}.json"
    try:
        try:
            register(me, np_, argv, proc.pid)
        except OSError:
            proc.terminate()              # the testbed went down before the job was registered
        code = proc.wait()
        gone = not me.exists() or instance_of(tb.workdir) != tb.instance
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        me.unlink(missing_ok=True)
    if gone:
        raise TestbedError(f"the testbed was taken down while the job ran (launcher exit status {code}); "
                           "its ranks were killed")
    return code

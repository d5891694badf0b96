"""An emulated cluster inside this machine: hosts as network namespaces on a bridge, each link
rate-limited by a token bucket and each host's CPU share capped by a cgroup quota, with MPI ranks
launched on them by the MPI runtime's own launcher (``autotune testbed up | mpiexec | down``).

Each host ``h<i>`` is a namespace ``at-h<i>`` joined to the bridge ``at-br`` by a veth pair,
address ``10.77.0.<i+1>``; the root namespace holds ``10.77.0.254`` on the bridge (where
``mpiexec`` runs). A rate (``tc`` tbf, e.g. ``1gbit``) shapes both ends of a host's link; a CPU
share (percent of one core, cgroup v1 ``cpu.cfs_quota_us``) slows every process on it. ``mpiexec``
reaches the hosts through an agent it calls as it would call ssh (``agent HOST COMMAND``), which
joins the host's cgroup, then enters its namespace with its own UTS namespace and hostname (one
shared hostname makes the TCP transport hang). Ranks on one host talk over shared memory, across hosts over
TCP on the bridge. Root only; ``down`` removes everything ``up`` made, and ``up`` first clears any
leftover of an earlier run.

A live testbed (its state saved and its bridge and namespaces up) is never replaced silently: ``up``
fails naming its hosts and running jobs unless given ``--replace``. The bridge's alias names the
live testbed's state directory, so an ``up`` with another directory sees it too. ``testbed mpiexec``
registers its job there; ``down`` (and ``up --replace``) stops the running jobs, each of which then
exits 1 saying the testbed was taken down, never 0 as its launcher may.
"""
# (This docstring is the command's --help.) Modules by job: hosts (what is asked for, its checks, the
# errors), state (the saved state, STATE_DIR), network (bridge, namespaces, shaped links), cgroups
# (the hosts' CPU quotas), job_registry (the running jobs), mpiexec (the agent, the mpiexec command
# line, run_job), lifecycle (up, down), system (running the tools; available), command_line
# (autotune testbed).
from __future__ import annotations

from .cgroups import CGROUP_CPU, PERIOD_US, set_cpu
from .command_line import HELP, add_arguments, run
from .hosts import MAX_HOSTS, PREFIX, SUBNET, ArgumentError, Host, TestbedError, check_hosts, hosts_from, parse_cpu
from .lifecycle import down, up
from .mpiexec import agent_script, mpiexec_command, run_job
from .network import live
from .state import Testbed, running, saved
from .system import available

__all__ = ["CGROUP_CPU", "HELP", "MAX_HOSTS", "PERIOD_US", "PREFIX", "SUBNET", "ArgumentError", "Host", "Testbed",
           "TestbedError", "add_arguments", "agent_script", "available", "check_hosts", "down", "hosts_from", "live",
           "mpiexec_command", "parse_cpu", "run", "run_job", "running", "saved", "set_cpu", "up"]

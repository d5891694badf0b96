"""The testbed's saved state: ``Testbed`` (its hosts and working directory, where ``up`` keeps
``state.json``, the agent, the hostfile and the jobs registry), read back by ``load`` / ``saved``.

``STATE_DIR`` (``$AUTOTUNE_TESTBED_DIR``, default ``/run/autotune-testbed``) is the working directory
when none is given; every default goes through ``state_dir``."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .hosts import SUBNET, Host, TestbedError
from .job_registry import brief, registered

STATE_DIR = Path(os.environ.get("AUTOTUNE_TESTBED_DIR", "/run/autotune-testbed"))


def state_dir(workdir: Path | str | None = None) -> Path:
    """``workdir``, or ``STATE_DIR`` without one."""
    return Path(workdir or STATE_DIR)


@dataclass
class Testbed:
    hosts: list[Host]
    workdir: str
    extra: dict = field(default_factory=dict)
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)    # tells a replaced testbed

    @property
    def agent(self) -> str:
        return str(Path(self.workdir) / "agent")

    @property
    def hostfile(self) -> str:
        return str(Path(self.workdir) / "hostfile")

    @property
    def jobs_dir(self) -> Path:
        return Path(self.workdir) / "jobs"

    def mpiexec_args(self) -> list[str]:
        """Options that make OpenMPI's ``mpiexec`` launch its ranks on the testbed's hosts. Where
        their slots outnumber this machine's cores, the emulated hosts share cores, so a waiting
        rank yields its core (``mpi_yield_when_idle``, which OpenMPI sets itself only where it
        sees one host oversubscribed): polling would take it from a computing rank of another host."""
        net = f"{SUBNET}.0/24"
        shared = sum(h.slots for h in self.hosts) > (os.cpu_count() or 1)
        return ["--hostfile", self.hostfile, "--prtemca", "plm_ssh_agent", self.agent,
                "--prtemca", "plm_ssh_no_tree_spawn", "1", "--prtemca", "oob_tcp_if_include", net,
                "--mca", "btl_tcp_if_include", net, "--mca", "btl", "tcp,sm,self", "--bind-to", "none",
                *(["--mca", "mpi_yield_when_idle", "1"] if shared else []), "--allow-run-as-root"]

    def save(self) -> None:
        Path(self.workdir, "state.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, workdir: Path | None = None) -> Testbed:
        """The testbed ``up`` left in ``workdir`` (default ``STATE_DIR``)."""
        try:
            data = json.loads((state_dir(workdir) / "state.json").read_text())
        except FileNotFoundError:
            raise TestbedError("no testbed is up (autotune testbed up)") from None
        return cls([Host(**h) for h in data["hosts"]], data["workdir"], data.get("extra", {}),
                   data.get("instance", ""))

    def describe(self) -> str:
        """One line: its hosts and the jobs running on it."""
        hosts = ", ".join(f"{h.name} {h.ip}" for h in self.hosts)
        jobs = "".join(f"; running job {j['pid']} ({j['np']} ranks: {brief(j['argv'])})" for j in running(self))
        return f"{len(self.hosts)} hosts {hosts} (state in {self.workdir}){jobs}"


def running(tb: Testbed) -> list[dict]:
    """The jobs ``testbed mpiexec`` runs on ``tb`` now."""
    return [job for _, job in registered(tb.jobs_dir)]


def saved(workdir: Path | None = None) -> Testbed | None:
    """The testbed state ``up`` saved in ``workdir`` (default ``STATE_DIR``), None without one."""
    try:
        return Testbed.load(workdir)
    except (TestbedError, OSError, ValueError, KeyError, TypeError):
        return None


def instance_of(workdir: str) -> str | None:
    """The instance of the testbed whose state is in ``workdir`` now (None: there is none)."""
    tb = saved(Path(workdir))
    return None if tb is None else tb.instance

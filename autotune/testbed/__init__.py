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
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autotune.host.processes import start_time

PREFIX = "at-"
BRIDGE = f"{PREFIX}br"
SUBNET = "10.77.0"
GATEWAY = f"{SUBNET}.254"
STATE_DIR = Path(os.environ.get("AUTOTUNE_TESTBED_DIR", "/run/autotune-testbed"))
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
# Where the state directory shows CGROUP_CPU (a bind mount): a job on an emulated host sees no
# cgroups in its own sysfs, but sees the state directory.
CGROUP_VIEW = "cgroup-cpu"
# CFS period of a host's CPU quota: short, so a capped host is slow evenly, as a slower processor
# is, rather than in bursts (with 100 ms a half-core host runs 50 ms, then answers no message for 50).
PERIOD_US = 5_000
STOP_GRACE = 5.0          # seconds a job's launcher has to end on SIGTERM before it is killed
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
_ALIAS = Path(f"/sys/class/net/{BRIDGE}/ifalias")      # the live testbed's state directory


class TestbedError(RuntimeError):
    """The testbed cannot be built or used here (not root, no namespaces, one is up, none is)."""

    status = 1      # the CLI's exit status: the run failed


class ArgumentError(TestbedError):
    """The hosts asked for are wrong (count, rate, CPU share, slots)."""

    status = 2


@dataclass
class Host:
    name: str
    ip: str
    rate: str | None = None       # tc rate of its link, e.g. "1gbit" (None: the veth's own speed)
    cpu: int | None = None        # percent of one core (None: no cap)
    slots: int = 1
    burst: int | None = None      # bytes the link may send at once above its rate (None: 1 ms of it, >= 32 KiB)

    @property
    def ns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        return f"{PREFIX}{self.name}"


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
            data = json.loads(Path(workdir or STATE_DIR, "state.json").read_text())
        except FileNotFoundError:
            raise TestbedError("no testbed is up (autotune testbed up)") from None
        return cls([Host(**h) for h in data["hosts"]], data["workdir"], data.get("extra", {}),
                   data.get("instance", ""))

    def describe(self) -> str:
        """One line: its hosts and the jobs running on it."""
        hosts = ", ".join(f"{h.name} {h.ip}" for h in self.hosts)
        jobs = "".join(f"; running job {j['pid']} ({j['np']} ranks: {_brief(j['argv'])})" for j in running(self))
        return f"{len(self.hosts)} hosts {hosts} (state in {self.workdir}){jobs}"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode:
        raise TestbedError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def available() -> str:
    """Why the testbed cannot run here ("" if it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, tc, cgroups)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = f"{PREFIX}probe"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode:
        return f"cannot create network namespaces: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return ""


MAX_HOSTS = 200


def _count_problem(count: int) -> str:
    """Why ``count`` hosts cannot be asked for ("" if they can)."""
    return "" if 1 <= count <= MAX_HOSTS else f"between 1 and {MAX_HOSTS} hosts, got {count}"


def _check(hosts: list[Host]) -> None:
    if _count_problem(len(hosts)):
        raise ArgumentError(_count_problem(len(hosts)))
    for h in hosts:
        if h.rate is not None and not _RATE.match(h.rate):
            raise ArgumentError(f"{h.name}: rate {h.rate!r} is not like 1gbit, 500mbit")
        if h.cpu is not None and not 1 <= h.cpu <= 100 * (os.cpu_count() or 1):
            raise ArgumentError(f"{h.name}: cpu share {h.cpu}% outside 1..{100 * (os.cpu_count() or 1)}")
        if h.burst is not None and h.burst < 1600:
            raise ArgumentError(f"{h.name}: burst {h.burst} B is below one frame (1600 B)")
        if h.slots < 1:
            raise ArgumentError(f"{h.name}: slots must be >= 1")


def hosts_from(count: int, rates: list[str] | None = None, cpus: list[int] | None = None,
               slots: int = 1, burst: int | None = None) -> list[Host]:
    """``count`` hosts h0.., the i-th with ``rates[i]`` / ``cpus[i]`` (the last value repeats);
    ArgumentError for a count outside 1..MAX_HOSTS."""
    if _count_problem(count):
        raise ArgumentError(_count_problem(count))

    def pick(values, i):
        return None if not values else values[min(i, len(values) - 1)]

    return [Host(f"h{i}", f"{SUBNET}.{i + 1}", pick(rates, i), pick(cpus, i), slots, burst) for i in range(count)]


def _shape(dev: str, rate: str, ns: str | None = None, burst: int | None = None) -> None:
    """A token bucket of ``rate`` on ``dev``'s egress. Its burst (default: 1 ms of the rate, at least
    32 KiB) is what passes at the veth's speed after a quiet spell: with a large one, sparse messages
    pay latency only and the rate caps the average; a burst of a few frames makes each message take
    its size over the rate, as on a wire."""
    bits = float(re.sub(r"[a-z]+$", "", rate)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[
        re.sub(r"^[\d.]+", "", rate)]
    burst = burst or max(32768, int(bits / 8 / 1000))
    cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
           "latency", "50ms"]
    _run(*(["ip", "netns", "exec", ns] if ns else []), *cmd)


def _agent_script(tb: Testbed) -> str:
    table = "\n".join(f"  {h.name}) ns={h.ns}; cg={_cgroup(h) or ''} ;;" for h in tb.hosts)
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


def _cgroup(h: Host) -> str | None:
    """The host's CPU cgroup (every host has one where cgroup v1 is mounted: ``set_cpu`` may cap it later)."""
    return str(CGROUP_CPU / f"{PREFIX}{h.name}") if CGROUP_CPU.is_dir() else None


def _quota(cg: str, cpu: int | None) -> None:
    Path(cg, "cpu.cfs_period_us").write_text(str(PERIOD_US))
    Path(cg, "cpu.cfs_quota_us").write_text(str(-1 if cpu is None else PERIOD_US * cpu // 100))


def saved(workdir: Path | None = None) -> Testbed | None:
    """The testbed state ``up`` saved in ``workdir`` (default ``STATE_DIR``), None without one."""
    try:
        return Testbed.load(workdir)
    except (TestbedError, OSError, ValueError, KeyError, TypeError):
        return None


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
    _check([host])
    cg = next((p / f"{PREFIX}{name}" for p in (CGROUP_CPU, Path(tb.workdir) / CGROUP_VIEW)
               if (p / f"{PREFIX}{name}").is_dir()), None)
    if cg is None:
        raise TestbedError(f"{name} has no CPU cgroup (cgroup v1 cpu controller at {CGROUP_CPU})")
    _quota(str(cg), cpu)
    tb.save()
    return tb


def _namespaces() -> set[str]:
    return {line.split(" ")[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines()}


def _owner() -> Path | None:
    """The state directory the bridge's alias names (``up`` sets it), None without one."""
    try:
        text = _ALIAS.read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def live(workdir: Path | None = None) -> Testbed | None:
    """The testbed that is up: the one whose state is in the directory the bridge names (else in
    ``workdir``, default ``STATE_DIR``) and all of whose namespaces exist; None for leftovers."""
    if not _ALIAS.parent.exists():
        return None
    try:
        tb = Testbed.load(_owner() or workdir)
    except (TestbedError, OSError, ValueError, KeyError, TypeError):
        return None
    return tb if {h.ns for h in tb.hosts} <= _namespaces() else None


def up(hosts: list[Host], workdir: Path | None = None, replace: bool = False) -> Testbed:
    """Build the testbed, its state kept in ``workdir`` (default ``STATE_DIR``), after clearing
    any leftover; a live testbed only with ``replace`` (its jobs then stop), else an error."""
    workdir = Path(workdir or STATE_DIR)
    _check(hosts)
    why = available()
    if why:
        raise TestbedError(why)
    old = live(workdir)
    if old is not None and not replace:
        raise TestbedError(f"a testbed is up: {old.describe()}; `autotune testbed up --replace` replaces it "
                           "(stopping its jobs), `autotune testbed down` removes it")
    down(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tb = Testbed(hosts, str(workdir))
    if CGROUP_CPU.is_dir():              # the hosts' cgroups where jobs on them can reach (set_cpu)
        (workdir / CGROUP_VIEW).mkdir(exist_ok=True)
        _run("mount", "--bind", str(CGROUP_CPU), str(workdir / CGROUP_VIEW))
    tb.save()
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    with contextlib.suppress(OSError):          # a path over 255 bytes: only this directory's up sees it
        _ALIAS.write_text(str(workdir.resolve()))
    _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    for h in hosts:
        _run("ip", "netns", "add", h.ns)
        _run("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
        _run("ip", "link", "set", h.veth, "master", BRIDGE, "up")
        for cmd in (["ip", "addr", "add", f"{h.ip}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                    ["ip", "link", "set", "lo", "up"]):
            _run("ip", "netns", "exec", h.ns, *cmd)
        if h.rate:
            _shape(h.veth, h.rate, burst=h.burst)
            _shape("eth0", h.rate, h.ns, h.burst)
        cg = _cgroup(h)
        if cg:
            Path(cg).mkdir(exist_ok=True)
            _quota(cg, h.cpu)
    Path(tb.hostfile).write_text("".join(f"{h.name} slots={h.slots}\n" for h in hosts))
    agent = Path(tb.agent)
    agent.write_text(_agent_script(tb))
    agent.chmod(0o755)
    return tb


def down(workdir: Path | None = None) -> list[dict]:
    """Remove what ``up`` made: namespaces, links, bridge, cgroups, the state directory (``workdir``'s
    and the live testbed's); stop its running jobs, which are returned."""
    owner = _owner()
    dirs = {Path(workdir or STATE_DIR), *([owner] if owner and (owner / "state.json").exists() else [])}
    stopped = [job for d in dirs for job in _stop_jobs(d)]
    for name in sorted(_namespaces()):
        if name.startswith(PREFIX):
            for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
                _run("kill", "-9", pid, check=False)
            _run("ip", "netns", "del", name, check=False)
    links = _run("ip", "-o", "link", "show", check=False).stdout
    for name in re.findall(rf"^\d+: ({re.escape(PREFIX)}[\w.-]+?)[@:]", links, flags=re.M):
        _run("ip", "link", "del", name, check=False)
    if CGROUP_CPU.is_dir():
        for cg in CGROUP_CPU.glob(f"{PREFIX}*"):
            procs = (cg / "cgroup.procs").read_text().split() if (cg / "cgroup.procs").exists() else []
            for pid in procs:
                _run("kill", "-9", pid, check=False)
            try:
                cg.rmdir()
            except OSError:
                pass
    for d in dirs:
        if (d / CGROUP_VIEW).is_mount():
            _run("umount", str(d / CGROUP_VIEW), check=False)
        if not (d / CGROUP_VIEW).is_mount():     # never walk the machine's cgroups
            shutil.rmtree(d, ignore_errors=True)
    return stopped


def _jobs(jobs_dir: Path) -> list[tuple[Path, dict]]:
    """The jobs registered in ``jobs_dir`` whose ``testbed mpiexec`` still runs, with their files."""
    out = []
    for path in sorted(jobs_dir.glob("*.json")):
        try:
            job = json.loads(path.read_text())
            if job["start"] is not None and start_time(job["pid"]) == job["start"]:
                out.append((path, job))
        except (OSError, ValueError, KeyError, TypeError):
            continue                      # a file half written or not ours: its job was not registered
    return out


def running(tb: Testbed) -> list[dict]:
    """The jobs ``testbed mpiexec`` runs on ``tb`` now."""
    return [job for _, job in _jobs(tb.jobs_dir)]


def _stop_jobs(workdir: Path) -> list[dict]:
    """Unregister the running jobs of the testbed in ``workdir`` (which tells each it was taken
    down) and end their launchers, killed if they outlast STOP_GRACE: a launcher still running when
    the links go can wait for its daemons' connections for minutes. Their ranks die with the namespaces."""
    jobs = _jobs(workdir / "jobs")
    launchers = [(job["launcher"], job["launcher_start"]) for _, job in jobs if job["launcher_start"] is not None]
    for path, _ in jobs:
        path.unlink(missing_ok=True)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, start in launchers:
            if start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + STOP_GRACE
        while any(start_time(pid) == start for pid, start in launchers) and time.monotonic() < deadline:
            time.sleep(0.05)
    return [job for _, job in jobs]


def _brief(argv: list[str], width: int = 72) -> str:
    """``argv`` in one line of at most ``width`` characters, its program by name, to recognize it."""
    line = " ".join(" ".join([Path(argv[0]).name, *argv[1:]] if argv else []).split())
    return line if len(line) <= width else line[:width - 3] + "..."


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
            tb.jobs_dir.mkdir(exist_ok=True)
            me.write_text(json.dumps({"pid": os.getpid(), "start": start_time(os.getpid()), "np": np_, "argv": argv,
                                      "launcher": proc.pid, "launcher_start": start_time(proc.pid)}))
        except OSError:
            proc.terminate()              # the testbed went down before the job was registered
        code = proc.wait()
        gone = not me.exists() or _instance(tb.workdir) != tb.instance
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        me.unlink(missing_ok=True)
    if gone:
        raise TestbedError(f"the testbed was taken down while the job ran (launcher exit status {code}); "
                           "its ranks were killed")
    return code


def _instance(workdir: str) -> str | None:
    """The instance of the testbed whose state is in ``workdir`` now (None: there is none)."""
    try:
        return Testbed.load(Path(workdir)).instance
    except (TestbedError, OSError, ValueError, KeyError, TypeError):
        return None


def parse_cpu(text: str) -> int | None:
    """A CPU share as given on a command line: an integer percent, or ``none`` (no cap)."""
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ArgumentError(f"cpu share must be an integer percent or 'none', got {text!r}") from None


def host_count(text: str) -> int:
    """``--hosts`` as given on a command line: an integer in 1..MAX_HOSTS (argparse's type)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an integer number of hosts, got {text!r}") from None
    if _count_problem(count):
        raise argparse.ArgumentTypeError(_count_problem(count))
    return count


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="testbed_command", required=True)
    u = sub.add_parser("up", help="start the emulated hosts")
    u.add_argument("--hosts", type=host_count, required=True, metavar="H",
                   help=f"how many emulated hosts (1..{MAX_HOSTS})")
    u.add_argument("--rate", nargs="+", help="link rate per host (tc syntax: 1gbit, 500mbit; the last repeats)")
    u.add_argument("--cpu", type=int, nargs="+", help="CPU share per host, percent of one core (the last repeats)")
    u.add_argument("--slots", type=int, default=1, help="MPI slots per host")
    u.add_argument("--burst", type=int, default=None, metavar="BYTES",
                   help="token-bucket burst of the shaped links (default: 1 ms of the rate, at least 32 KiB; "
                        "a few frames, e.g. 3000, make each message take its size over the rate, as on a wire)")
    u.add_argument("--replace", action="store_true",
                   help="replace a testbed that is up (stopping its jobs) rather than fail")
    sub.add_parser("down", help="remove the emulated hosts, stopping the jobs running on them")
    c = sub.add_parser("cpu", help="change a host's CPU share while jobs run: autotune testbed cpu HOST PCT")
    c.add_argument("host")
    c.add_argument("pct", help="percent of one core, or 'none' for no cap")
    sub.add_parser("show", help="print the testbed and the mpiexec options that use it")
    r = sub.add_parser("mpiexec", help="run mpiexec on the testbed: autotune testbed mpiexec NP CMD...")
    r.add_argument("np", type=int)
    r.add_argument("argv", nargs=argparse.REMAINDER)


def run(args) -> int:
    """``autotune testbed ...``; errors are one line (exit 2: bad hosts asked for, 1: the run failed)."""
    try:
        return _command(args)
    except (TestbedError, OSError, ValueError) as exc:
        print(f"autotune testbed: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return getattr(exc, "status", 1)


def _command(args) -> int:
    if args.testbed_command == "up":
        tb = up(hosts_from(args.hosts, args.rate, args.cpu, args.slots, args.burst), replace=args.replace)
        print(f"testbed up: {len(tb.hosts)} hosts " + ", ".join(
            f"{h.name} {h.ip} rate={h.rate or 'veth'} cpu={h.cpu or 100}%" for h in tb.hosts))
        return 0
    if args.testbed_command == "down":
        stopped = down()
        print("testbed down" + "".join(f"; stopped job {j['pid']} ({_brief(j['argv'])})" for j in stopped))
        return 0
    if args.testbed_command == "cpu":
        pct = parse_cpu(args.pct)
        set_cpu(args.host, pct)
        print(f"testbed: {args.host} cpu={'no cap' if pct is None else f'{pct}%'}")
        return 0
    if args.testbed_command == "mpiexec":
        _check_job(args.np, args.argv)
    tb = Testbed.load()
    if args.testbed_command == "show":
        print(json.dumps(asdict(tb), indent=1))
        print("mpiexec options: " + shlex.join(tb.mpiexec_args()))
        return 0
    return run_job(tb, args.np, args.argv)


def _check_job(np_: int, argv: list[str]) -> None:
    """``testbed mpiexec NP CMD...``'s arguments, before any testbed is looked at (ArgumentError: exit 2)."""
    if np_ < 1:
        raise ArgumentError(f"mpiexec: NP must be a positive number of ranks, got {np_}")
    if not argv:
        raise ArgumentError("mpiexec: no command to run (autotune testbed mpiexec NP CMD...)")

"""The testbed's network: the bridge ``at-br`` (the root namespace at ``GATEWAY`` on it), one
network namespace per host joined to it by a veth pair, each link shaped by a token bucket; which
testbed is live (the bridge's alias names its state directory); removing all of it."""
from __future__ import annotations

import contextlib
import re
from pathlib import Path

from .hosts import PREFIX, SUBNET, Host, TestbedError
from .state import Testbed
from .system import run_tool

BRIDGE = f"{PREFIX}br"
GATEWAY = f"{SUBNET}.254"
_ALIAS = Path(f"/sys/class/net/{BRIDGE}/ifalias")      # the live testbed's state directory


def shape(dev: str, rate: str, ns: str | None = None, burst: int | None = None) -> None:
    """A token bucket of ``rate`` on ``dev``'s egress. Its burst (default: 1 ms of the rate, at least
    32 KiB) is what passes at the veth's speed after a quiet spell: with a large one, sparse messages
    pay latency only and the rate caps the average; a burst of a few frames makes each message take
    its size over the rate, as on a wire."""
    bits = float(re.sub(r"[a-z]+$", "", rate)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[
        re.sub(r"^[\d.]+", "", rate)]
    burst = burst or max(32768, int(bits / 8 / 1000))
    cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
           "latency", "50ms"]
    run_tool(*(["ip", "netns", "exec", ns] if ns else []), *cmd)


def namespaces() -> set[str]:
    """The machine's network namespaces by name."""
    return {line.split(" ")[0] for line in run_tool("ip", "netns", "list", check=False).stdout.splitlines()}


def owner() -> Path | None:
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
        tb = Testbed.load(owner() or workdir)
    except (TestbedError, OSError, ValueError, KeyError, TypeError):
        return None
    return tb if {h.ns for h in tb.hosts} <= namespaces() else None


def add_bridge(workdir: Path) -> None:
    """The bridge, its alias naming ``workdir`` (the state directory), the root namespace's address on it."""
    run_tool("ip", "link", "add", BRIDGE, "type", "bridge")
    with contextlib.suppress(OSError):          # a path over 255 bytes: only this directory's up sees it
        _ALIAS.write_text(str(workdir.resolve()))
    run_tool("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    run_tool("ip", "link", "set", BRIDGE, "up")


def add_host(h: Host) -> None:
    """Host ``h``'s namespace on the bridge, its address and its link shaped at its rate (if any)."""
    run_tool("ip", "netns", "add", h.ns)
    run_tool("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
    run_tool("ip", "link", "set", h.veth, "master", BRIDGE, "up")
    for cmd in (["ip", "addr", "add", f"{h.ip}/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                ["ip", "link", "set", "lo", "up"]):
        run_tool("ip", "netns", "exec", h.ns, *cmd)
    if h.rate:
        shape(h.veth, h.rate, burst=h.burst)
        shape("eth0", h.rate, h.ns, h.burst)


def remove_all() -> None:
    """Every testbed namespace (its processes killed), link and the bridge, leftovers included."""
    for name in sorted(namespaces()):
        if name.startswith(PREFIX):
            for pid in run_tool("ip", "netns", "pids", name, check=False).stdout.split():
                run_tool("kill", "-9", pid, check=False)
            run_tool("ip", "netns", "del", name, check=False)
    links = run_tool("ip", "-o", "link", "show", check=False).stdout
    for name in re.findall(rf"^\d+: ({re.escape(PREFIX)}[\w.-]+?)[@:]", links, flags=re.M):
        run_tool("ip", "link", "del", name, check=False)

"""The machine's tools the testbed drives (ip, tc, unshare, mount, kill): running one, and whether
this machine can run the testbed at all (``available``)."""
from __future__ import annotations

import os
import shutil
import subprocess

from .hosts import PREFIX, TestbedError


def run_tool(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd``, its output captured; with ``check``, a TestbedError naming it when it fails."""
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
    made = run_tool("ip", "netns", "add", probe, check=False)
    if made.returncode:
        return f"cannot create network namespaces: {made.stderr.strip()}"
    run_tool("ip", "netns", "del", probe, check=False)
    return ""

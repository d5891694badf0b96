"""The install-time probe: profiles -> plan -> operands -> timing -> database."""
import os

from .profile import Profile, ProfileError, load_profile
from .runner import ProbeError, ProbeResult, run_probe

__all__ = ["Profile", "ProfileError", "ProbeError", "ProbeResult", "child_env", "load_profile", "run_probe"]


def child_env() -> dict[str, str]:
    """This environment for a Python child process (``-m`` or ``-c``) that must import the installed
    package: PYTHONSAFEPATH keeps the current directory, perhaps a source checkout whose autotune/
    lacks the compiled kernels, off the front of its sys.path."""
    return {**os.environ, "PYTHONSAFEPATH": "1"}

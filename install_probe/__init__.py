"""The install-time probe: profiles -> plan -> operands -> timing -> database."""
from .profile import Profile, ProfileError, load_profile
from .runner import ProbeError, ProbeResult, run_probe

__all__ = ["Profile", "ProfileError", "ProbeError", "ProbeResult", "load_profile", "run_probe"]

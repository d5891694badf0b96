"""Where the system-parameter database lives: $AUTOTUNE_DB, else the per-user data directory."""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "AUTOTUNE_DB"


def default_path() -> Path:
    """The database path used when none is given."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("autotune", appauthor=False)) / "system_parameters.h5"


def resolve(path: str | os.PathLike | None) -> Path:
    """``path`` if given, else the default location."""
    return Path(path).expanduser() if path is not None else default_path()

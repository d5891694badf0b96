"""What every ``autotune bench`` command shares: its one-line errors, where results may be
written, and robust statistics of repeated timings."""
from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autotune.cli.common import error
from autotune.cli.common import output_problem as output_problem  # the benchmarks' check of --out
from autotune.db import load_sp
from autotune.entry.protocol import MPI_MISSING

if TYPE_CHECKING:
    from mpi4py import MPI


def probed_sp(command: str, db, problem: str = ""):
    """``(system parameters of the database db, 0)`` for a benchmark whose arguments passed, else
    ``(None, status)`` after its one error line: ``problem`` (2), or no usable BLAS measurements (1)."""
    if problem:
        return None, error(f"bench {command}", problem, 2)
    sp = load_sp(db)
    if sp.table is None:
        return None, error(f"bench {command}", f"no usable database ({sp.reason}): run `autotune-install` first", 1)
    return sp, 0


def mpi_world(command: str, problem: str = ""):
    """``(COMM_WORLD, 0)`` for an MPI benchmark whose arguments passed, else ``(None, status)``
    after its one error line (``problem``, or mpi4py missing)."""
    if not problem and importlib.util.find_spec("mpi4py") is None:
        problem = MPI_MISSING
    if problem:
        return None, error(f"bench {command}", problem, 2)
    from mpi4py import MPI

    return MPI.COMM_WORLD, 0


def report_root(comm: MPI.Comm, report: dict, out: str | None) -> None:
    """The root prints ``report`` as JSON and writes it to ``out`` if given."""
    if comm.rank == 0:
        print(json.dumps(report, indent=1, default=str), flush=True)
        if out:
            write_json(out, report)


def write_json(path: str, doc: dict) -> None:
    """Write ``doc`` atomically: an interrupted write leaves the previous file as it was."""
    write_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` through a temporary file in the same directory, then rename it into place."""
    target = Path(path).expanduser()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str, text: str) -> None:
    """Write a text result (Markdown table) where the user said."""
    Path(path).expanduser().write_text(text if text.endswith("\n") else text + "\n")


def timed(fn: Callable[[], object]) -> float:
    """Wall time of one call in seconds."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def timed_collective(comm: MPI.Comm, fn: Callable[[], object]) -> float:
    """Seconds of ``fn()`` on every rank of ``comm``, from a barrier to a barrier."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    comm.Barrier()
    return time.perf_counter() - t0


def median_spread(times) -> dict[str, float]:
    """Median, interquartile spread over the median, and count of repeated timings."""
    q1, med, q3 = quartiles(times)
    return {"median": med, "spread": (q3 - q1) / med if med > 0 else 0.0, "runs": len(times)}


def quartiles(values) -> tuple[float, float, float]:
    """(q1, median, q3) of ``values``."""
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float(q1), float(med), float(q3)


def half_iqr(values) -> float:
    """Half the interquartile range relative to the median: the spread of one ratio series."""
    q1, med, q3 = quartiles(values)
    return (q3 - q1) / 2 / med if med > 0 else float("inf")

"""``autotune bench scalapack``: the distributed LU and Cholesky against ScaLAPACK's pdgetrf and
pdpotrf, on the same already-distributed data in the same MPI, under ``mpiexec -n P``.

Both sides start from the local pieces of one block-cyclic matrix (generated from the same seed
on every rank, no communication) and time the factorization alone, between barriers: ScaLAPACK
at its block (``--block``, default 64) on every r x c grid of P, autotune's lower-level API
(``distributed.lu.lu_dist``, ``distributed.cholesky.cholesky_dist``) at that block and at its
own (``--own-block``). Rounds interleave the candidates (A/B), the pieces restored untimed before
each call. One BLAS thread per rank on both sides (set OPENBLAS_NUM_THREADS=1 for ScaLAPACK's
BLAS). ScaLAPACK and BLACS come from a shared library (``--lib``, default: the system's
``scalapack-openmpi``) called through ctypes; mpi4py must be built against the same MPI as that
library (docs/benchmarks.md#scalapack). The first round also checks that both give the same factors.

    mpiexec -n 2 --bind-to none autotune bench scalapack --n 4096 --out FILE.json
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import time
from typing import TYPE_CHECKING

import numpy as np

from autotune.benchmarks._common import output_problem, write_json
from autotune.cli.common import error
from autotune.geometry.layout import Axis, block_cyclic

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "distributed LU/Cholesky vs ScaLAPACK pdgetrf/pdpotrf on distributed data (under mpiexec -n P)"
_INT = ctypes.c_int
_PTR = ctypes.POINTER


class ScaLAPACK:
    """The few BLACS/ScaLAPACK entry points the comparison calls (Fortran ABI, 32-bit integers)."""

    def __init__(self, path: str):
        self.lib = lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        lib.Cblacs_get.argtypes = [_INT, _INT, _PTR(_INT)]
        lib.Cblacs_gridinit.argtypes = [_PTR(_INT), ctypes.c_char_p, _INT, _INT]
        lib.Cblacs_gridinfo.argtypes = [_INT] + [_PTR(_INT)] * 4
        lib.Cblacs_gridexit.argtypes = [_INT]
        lib.numroc_.restype = _INT

    def grid(self, r: int, c: int) -> int:
        ctxt = _INT(0)
        self.lib.Cblacs_get(-1, 0, ctypes.byref(ctxt))
        self.lib.Cblacs_gridinit(ctypes.byref(ctxt), b"R", r, c)
        return ctxt.value

    def exit(self, ctxt: int) -> None:
        self.lib.Cblacs_gridexit(ctxt)

    def descriptor(self, n: int, b: int, ctxt: int, lld: int) -> np.ndarray:
        desc, info = np.zeros(9, dtype=np.int32), _INT(0)
        self.lib.descinit_(desc.ctypes, *(ctypes.byref(_INT(v)) for v in (n, n, b, b, 0, 0, ctxt, max(1, lld))),
                           ctypes.byref(info))
        if info.value:
            raise RuntimeError(f"descinit info {info.value}")
        return desc

    def getrf(self, a: np.ndarray, desc: np.ndarray, ipiv: np.ndarray) -> int:
        n, one, info = _INT(int(desc[2])), _INT(1), _INT(0)
        self.lib.pdgetrf_(ctypes.byref(n), ctypes.byref(n), a.ctypes, ctypes.byref(one), ctypes.byref(one),
                          desc.ctypes, ipiv.ctypes, ctypes.byref(info))
        return info.value

    def potrf(self, a: np.ndarray, desc: np.ndarray) -> int:
        n, one, info = _INT(int(desc[2])), _INT(1), _INT(0)
        self.lib.pdpotrf_(ctypes.c_char_p(b"L"), ctypes.byref(n), a.ctypes, ctypes.byref(one), ctypes.byref(one),
                          desc.ctypes, ctypes.byref(info))
        return info.value


def _piece(full: np.ndarray, n: int, r: int, c: int, b: int, pr: int, pc: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's block-cyclic piece of ``full`` (Fortran order) and the mask of its elements on
    or below the global diagonal."""
    rows, cols = Axis(n, r, b).indices(pr), Axis(n, c, b).indices(pc)
    return np.asfortranarray(full[np.ix_(rows, cols)]), rows[:, None] >= cols[None, :]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=4096, help="matrix order")
    p.add_argument("--block", type=int, default=64, help="ScaLAPACK's block (also timed for autotune)")
    p.add_argument("--own-block", type=int, default=256, help="autotune's own block, timed as well")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (after one warm-up round)")
    p.add_argument("--lib", default=None, help="ScaLAPACK shared library (default: the system's scalapack-openmpi)")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def _candidates(ns, P: int):
    """(name, family, grid, block) of every timed call: ScaLAPACK at its block on every grid,
    autotune at that block and its own on every grid."""
    out = []
    for r in (d for d in range(1, P + 1) if P % d == 0):
        c = P // r
        for fam in ("lu", "cholesky"):
            out.append((f"scalapack_{fam} {r}x{c} b={ns.block}", fam, (r, c), ns.block, "scalapack"))
            for b in dict.fromkeys((ns.block, ns.own_block)):
                out.append((f"autotune_{fam} {r}x{c} b={b}", fam, (r, c), b, "autotune"))
    return out


class _Runner:
    """Pieces, descriptors and grids of every candidate, built once; ``call`` times one."""

    def __init__(self, comm: MPI.Comm, sl: ScaLAPACK, a: np.ndarray, s: np.ndarray, n: int):
        self.comm, self.sl, self.a, self.s, self.n = comm, sl, a, s, n
        self.state: dict = {}

    def setup(self, name, fam, grid, b, side):
        from autotune.distributed import DistMatrix, ProcessGrid

        r, c = grid
        pr, pc = divmod(self.comm.rank, c)
        pristine, lower = _piece(self.a if fam == "lu" else self.s, self.n, r, c, b, pr, pc)
        # what both sides compute: all of the LU, the lower triangle of the Cholesky factor
        st = {"pristine": pristine, "work": pristine.copy(order="F"), "mask": lower if fam == "cholesky" else True}
        if side == "scalapack":
            ctxt = self.sl.grid(r, c)
            st.update(ctxt=ctxt, desc=self.sl.descriptor(self.n, b, ctxt, pristine.shape[0]),
                      ipiv=np.zeros(pristine.shape[0] + b, dtype=np.int32))
        else:
            st.update(grid=ProcessGrid(self.comm, r, c), layout=block_cyclic(self.n, self.n, r, c, b),
                      DistMatrix=DistMatrix)
        self.state[name] = st

    def call(self, name, fam, grid, b, side) -> tuple[float, np.ndarray, object]:
        from autotune.distributed.cholesky import cholesky_dist
        from autotune.distributed.lu import lu_dist

        st = self.state[name]
        np.copyto(st["work"], st["pristine"])
        self.comm.Barrier()
        t0 = time.perf_counter()
        piv = None
        if side == "scalapack":
            info = self.sl.getrf(st["work"], st["desc"], st["ipiv"]) if fam == "lu" else self.sl.potrf(st["work"],
                                                                                                     st["desc"])
            piv = st["ipiv"]
        else:
            A = st["DistMatrix"](st["work"], st["layout"], self.comm)
            if fam == "lu":
                _, piv, info = lu_dist(A, st["grid"], b, threads=1)
            else:
                cholesky_dist(A, st["grid"], b, lower=True, threads=1, overwrite_a=True, check_finite=False,
                              backend="scipy-openblas")
                info = 0
        self.comm.Barrier()
        seconds = time.perf_counter() - t0
        if info:
            raise RuntimeError(f"{name}: info {info}")
        return seconds, st["work"] * st["mask"], piv


def run(args) -> int:
    """Time every candidate collectively; the root prints the report (and writes it to --out)."""
    problem = output_problem("--out", args.out) or (
        "" if min(args.n, args.block, args.own_block, args.rounds) >= 1 else "--n, --block, --own-block and "
                                                                              "--rounds must be positive")
    if problem:
        return error("bench scalapack", problem, 2)
    path = args.lib or ctypes.util.find_library("scalapack-openmpi") or ctypes.util.find_library("scalapack")
    if not path:
        return error("bench scalapack", "no ScaLAPACK library found (--lib PATH; Debian: libscalapack-openmpi-dev)", 2)
    from mpi4py import MPI

    from autotune.install_probe.operands import spd_matrix

    comm, P, n = MPI.COMM_WORLD, MPI.COMM_WORLD.size, args.n
    sl = ScaLAPACK(path)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    runner = _Runner(comm, sl, a, spd_matrix(rng, n), n)
    cands = _candidates(args, P)
    for cand in cands:
        runner.setup(*cand)
    times: dict[str, list[float]] = {}
    agree: dict[str, float] = {}
    for rnd in range(args.rounds + 1):
        outs = {}
        for cand in cands:
            sec, work, piv = runner.call(*cand)
            if rnd:
                times.setdefault(cand[0], []).append(sec)
            elif cand[3] == args.block:
                outs[cand[0]] = (work, None if piv is None else np.array(piv))
        if not rnd:
            agree = _agreement(outs, args.block)
    if comm.rank == 0:
        med = {k: float(np.median(v)) for k, v in times.items()}
        report = {"n": n, "P": P, "block": args.block, "own_block": args.own_block, "library": path,
                  "median_s": med, "quartiles_s": {k: np.percentile(v, [25, 75]).tolist() for k, v in times.items()},
                  "max_factor_difference_rank0": agree, "ratios": _ratios(med)}
        print(json.dumps(report, indent=1), flush=True)
        if args.out:
            write_json(args.out, report)
    return 0


def _agreement(outs: dict, block: int) -> dict[str, float]:
    """Largest difference between ScaLAPACK's and autotune's factors (this rank's piece) per grid
    and family at the shared block: the same data, the same algorithm, so rounding only."""
    diff = {}
    for name, (work, _) in outs.items():
        if name.startswith("scalapack_"):
            other = name.replace("scalapack_", "autotune_")
            if other in outs:
                mine = outs[other][0]
                diff[name.split(" ", 1)[1] + " " + name.split()[0][10:]] = float(np.abs(work - mine).max())
    return diff


def _ratios(med: dict[str, float]) -> dict[str, float]:
    """autotune's best over ScaLAPACK's best grid, per family (above 1: autotune faster)."""
    out = {}
    for fam in ("lu", "cholesky"):
        sc = min(v for k, v in med.items() if k.startswith(f"scalapack_{fam} "))
        au = min(v for k, v in med.items() if k.startswith(f"autotune_{fam} "))
        out[fam] = sc / au
    return out

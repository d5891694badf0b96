#!/usr/bin/env bash
# Issue 4's acceptance run, end to end, on fresh probes (about an hour on this 2-core machine):
#   1. the BLAS probe (standard profile; an OUTDIR/blas.h5 left by an earlier run is reused), copied into one database per platform (P = 2, P = 4);
#   2. per platform (P = 2, then P = 4, oversubscribed here: its own platform), the comm probe and
#      right after it `autotune bench mpi-validate`: every plan at n = 1024, 2048 (training;
#      stores fitted phase factors) and at n = 1536, 2560 (held out), both families (the machine drifts over the hour:
#      each platform's runs follow its own probe);
#   3. `autotune bench mpi-speed` at P = 2, n = 4096 against numpy/scipy and dask (needs the `bench` extra);
#   4. the (ts, tw) held-out summary of each comm probe (bench/comm_repeatability.py).
# Usage: bash bench/mpi_acceptance.sh OUTDIR TAG    (databases and tables *-TAG.* go to OUTDIR, never the checkout)
set -euo pipefail
OUT=${1:?OUTDIR}; TAG=${2:?TAG}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); RES=$OUT   # absolute: the script cds to the checkout
cd "$(dirname "$0")/.."
MPI=(mpiexec --oversubscribe); [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
plain() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }   # benchmark a current numpy
mkdir -p "$OUT"
if [ -s "$OUT/blas.h5" ]; then echo "reusing $OUT/blas.h5 (delete it for a fresh BLAS probe)"
else plain autotune-install --profile standard --db "$OUT/blas.h5" --no-progress; fi
for P in 2 4; do                 # each platform validated right after its own probe
  cp "$OUT/blas.h5" "$OUT/p$P.h5"
  plain autotune-install --mpi --np "$P" --db "$OUT/p$P.h5"
  for F in gemm cholesky; do
    plain "${MPI[@]}" -n "$P" autotune bench mpi-validate --family "$F" --sizes 1024 2048 --reps 5 --fit \
      --db "$OUT/p$P.h5" --out "$RES/mpi-validate-$F-P$P-$TAG.json" --markdown "$RES/mpi-validate-$F-P$P-$TAG.md"
    plain "${MPI[@]}" -n "$P" autotune bench mpi-validate --family "$F" --sizes 1536 2560 --reps 5 \
      --db "$OUT/p$P.h5" --out "$RES/mpi-eval-$F-P$P-$TAG.json" --markdown "$RES/mpi-eval-$F-P$P-$TAG.md"
  done
done
for F in cholesky gemm; do
  plain "${MPI[@]}" -n 2 autotune bench mpi-speed --family "$F" --n 4096 --rounds 5 --db "$OUT/p2.h5" \
    --out "$RES/mpi-speed-$F-P2-$TAG.json"
done
for P in 2 4; do python bench/comm_repeatability.py "$OUT/p$P.h5" | tail -n 1; done

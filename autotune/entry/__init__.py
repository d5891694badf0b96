"""The entry layer: one module per family (``gemm``, ``cholesky``, ``lu`` for LU and the solves,
``stencil``), each with its one-process call and its collective ``comm=`` call, on the shared
decision (``decide``: choose, guard, fall back) and the collective protocol (``protocol``: ranks
agree on the arguments, the root plans, all run or all raise alike)."""

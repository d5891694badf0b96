"""Distributed dense linear algebra over MPI (mpi4py, buffer API; imported only when used).

``autotune.geometry.layout`` (re-exported here) says where each element lives (1-D block, 2-D block,
2-D block-cyclic on an r x c grid); ``movement`` moves matrices between a root and a layout or between two layouts;
``grid`` builds the row and column communicators. Nothing here is imported by ``import autotune``.
"""
from autotune.geometry.layout import Axis, Layout, block_2d, block_cyclic, row_block

from .grid import ProcessGrid
from .movement import DistMatrix, gather, redistribute, scatter

__all__ = ["Axis", "DistMatrix", "Layout", "ProcessGrid", "block_2d", "block_cyclic", "gather",
           "redistribute", "row_block", "scatter"]

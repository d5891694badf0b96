"""Selection: enumerate candidate configurations, evaluate the models, rank, cache the decision.

Like FFTW's planner over measured wisdom: the SP database is the wisdom, a ``Decision`` is the
plan. Nothing here loads a BLAS library; only the dispatcher does, for the chosen candidate.
"""
from autotune.core.plans import ALGORITHMS, Candidate

from .candidates import as_candidate
from .decision import Decision, Ranked
from .ranking import choose, clear_cache, rank

__all__ = ["ALGORITHMS", "Candidate", "Decision", "Ranked", "as_candidate", "choose", "clear_cache", "rank"]

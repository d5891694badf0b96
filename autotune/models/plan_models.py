"""Each family's distributed plan models, registered once: a plan's phases for a typed problem."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.core.families import CholeskyProblem, Problem
from autotune.core.plans import PHASES, Plan
from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import SPLookup

from . import distributed_cholesky, distributed_gemm, distributed_lu, movement, stencil


def _by_dims(model: Callable, problem: Problem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    return model(*problem.dims, plan, sp, cp)


def _cholesky(model: Callable, problem: CholeskyProblem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    return model(problem.n, plan, sp, cp, lower=problem.lower, order=problem.memory)


def _whole(model: Callable, problem: Problem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    return model(problem, plan, sp, cp)


def _nothing(problem: Problem, plan: Plan, sp: SPLookup) -> dict[str, float]:
    return {}


def _no_terms(problem: Problem, plan: Plan, sp: SPLookup, cp: CommParams) -> list[str]:
    return []


def _cholesky_local(problem: CholeskyProblem, plan: Plan, sp: SPLookup) -> dict[str, float]:
    """A one-process Cholesky as run over MPI: the root's finiteness check (its ``distribution``),
    then the call's working copy."""
    n = problem.n
    return {"distribution": movement.finite_check(sp, n, n, plan.backend, plan.threads),
            "compute": movement.copy(sp, n * n)}


@dataclass(frozen=True)
class PlanModels:
    """A family's plan models by algorithm, the phase in which a faster rank waits (per algorithm
    that has one), how the problem's fields reach a model, what a one-process plan adds to the
    single-process prediction when run over MPI, and the model's terms explain shows."""

    models: dict[str, Callable]
    wait_phase: dict[str, str] = field(default_factory=dict)
    call: Callable = _by_dims
    local: Callable = _nothing
    explain: Callable = _no_terms      # (problem, plan, sp, cp) -> lines explain prints for a chosen plan

    def phases(self, problem: Problem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
        """Predicted seconds per phase (and "total") of ``plan`` on ``problem``."""
        return self.call(self.models[plan.algorithm], problem, plan, sp, cp)

    def local_phases(self, problem: Problem, plan: Plan, sp: SPLookup, seconds: float) -> dict[str, float]:
        """The one-process plan's phases: the single-process prediction ``seconds`` plus ``local``."""
        phases = dict.fromkeys(PHASES, 0.0)
        phases["compute"] = seconds
        for name, extra in self.local(problem, plan, sp).items():
            phases[name] += extra
        phases["total"] = sum(phases[name] for name in PHASES)
        return phases


REGISTRY: dict[str, PlanModels] = {
    "gemm": PlanModels(distributed_gemm.MODELS, distributed_gemm.WAIT_PHASE),
    "cholesky": PlanModels(distributed_cholesky.MODELS, distributed_cholesky.WAIT_PHASE, _cholesky, _cholesky_local),
    "lu": PlanModels({"lu": distributed_lu.model}, {"lu": distributed_lu.WAIT_PHASE["lu"]},
                     explain=distributed_lu.explain),
    "solve": PlanModels({"gesv": distributed_lu.solve_model}, {"gesv": distributed_lu.WAIT_PHASE["gesv"]},
                        explain=distributed_lu.explain),
    "stencil": PlanModels(stencil.MODELS, call=_whole, explain=stencil.terms),
}

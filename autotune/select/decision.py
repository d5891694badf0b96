"""The ranking's result: each candidate's ranked time with what led to it (``Ranked``), and the
decision for one problem (``Decision``), whose text is ``explain``'s."""
from __future__ import annotations

from dataclasses import dataclass, field

from autotune.backends.pools import PoolState
from autotune.core.assumptions import INCUMBENT_MARGIN
from autotune.core.families import label
from autotune.core.plans import Candidate
from autotune.models import memory

from . import corrections
from .corrections import Correction
from .recorder import UNMEASURED


@dataclass(frozen=True)
class Ranked:
    """A candidate, the time it is ranked by, the SP terms used (``explain``), the pure model
    prediction (fitted or analytical, with dispatch) and the correction steps that led to ``seconds``."""

    candidate: Candidate
    seconds: float
    terms: tuple[str, ...] = ()
    model_seconds: float | None = None
    corrections: tuple[Correction, ...] = ()
    split: tuple[tuple[str, float], ...] = ()    # analytical time by routine call kind (``explain``)

    @property
    def predicted(self) -> float:
        return self.seconds if self.model_seconds is None else self.model_seconds

    @property
    def extrapolated(self) -> bool:
        """Some SP term of it was looked up beyond its series' measured sizes (ranked with ``explain``)."""
        return any(UNMEASURED in t for t in self.terms)


@dataclass
class Decision:
    """The ranking for one problem (best first) and the candidate chosen from it; ``str()`` is the
    human-readable explanation (``describe``)."""

    family: str
    dims: tuple[int, ...]
    threads: int
    ranking: list[Ranked]
    chosen: Candidate
    incumbent: Candidate | None = None
    notes: list[str] = field(default_factory=list)
    after: PoolState | None = None     # the library call before this one, while its pool counts
    limit: str = ""                    # what set the thread budget (``autotune.host.budget``), for explain
    margin: float = INCUMBENT_MARGIN   # what the best alternative had to beat the reference by (select.margin)

    def _reference_line(self, incumbent: Candidate) -> str:
        """The reference call (numpy/scipy's own) beside the choice, and the margin between them."""
        ref = self.predicted(incumbent)
        line = (f"  reference: {incumbent} (numpy/scipy's call) {ref * 1e3:.3f} ms predicted; another "
                f"candidate replaces it only when predicted more than {self.margin:.0%} faster")
        if self.chosen != incumbent:
            line += f" ({self.chosen}: {ref / self.predicted(self.chosen):.2f}x)"
        return line

    def predicted(self, cand: Candidate) -> float:
        for r in self.ranking:
            if r.candidate == cand:
                return r.seconds
        raise KeyError(str(cand))

    def describe(self, top: int = 12) -> str:
        """The choice; the SP values the ``top`` candidates used, each listed once; then per candidate
        its ranked and model times, the SP values it read, and the corrections that changed it."""
        budget = f"{self.threads} ({self.limit})" if self.limit else f"{self.threads}"
        lines = [f"{label(self.family, self.dims)}, thread budget {budget}: chose {self.chosen}"]
        if self.incumbent is not None:
            lines.append(self._reference_line(self.incumbent))
        lines.append(f"  after: {self.after.backend} {self.after.threads}t (its pool still counts)" if self.after
                     else "  after: an idle spell (no pool hot)")
        lines.append(f"  memory: {memory.local(self.dims, self.family, self.chosen).describe()}")
        lines += [f"  note: {n}" for n in self.notes]
        shown = self.ranking[:top]
        index = _sp_index(shown)
        if index:
            lines.append("  SP used:")
            lines += [f"    [{i}] {t}" for t, i in index.items()]
        lines.append(f"  ranked by: model, then {' > '.join(corrections.STEPS)} where they apply")
        best = self.ranking[0].seconds
        for i, r in enumerate(shown, 1):
            model = r.corrections[0].before if r.corrections else r.seconds
            refs = ",".join(str(index[t]) for t in dict.fromkeys(r.terms))
            lines.append(f"  {i:2d}. {str(r.candidate):42s} {r.seconds * 1e3:10.3f} ms  x{r.seconds / best:5.2f}"
                         f"  model {model * 1e3:.3f} ms" + (f"  SP [{refs}]" if refs else ""))
            if len(r.split) > 1:
                lines.append("        model by call: " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in r.split) + " ms")
            line = corrections.summary(r.corrections)
            lines += [f"        {line}"] if line else []
        if len(self.ranking) > top:
            lines.append(f"  ... {len(self.ranking) - top} more candidates")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def _sp_index(ranking: list[Ranked]) -> dict[str, int]:
    """Each distinct SP lookup of ``ranking``, numbered from 1 in order of first use."""
    index: dict[str, int] = {}
    for r in ranking:
        for t in r.terms:
            index.setdefault(t, len(index) + 1)
    return index

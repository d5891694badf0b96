"""Evaluation of the communication models in (p, m) (``comm_scaling`` fits them): the candidate
forms of ts(p) and tw(p), the stored rows (PMODEL_DTYPE) and one primitive's model as Hockney
regimes at any p. Apart from the fits so that the lookup (``comm_lookup.CommParams``) needs no fitting code.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Candidate forms of ts(p) and tw(p), in the order ties go (the simplest first).
FORMS = ("const", "log2", "ceil_log2", "lin")
# How each form enters a model, F(p) - F(2) (so the constant is the cost at p = 2).
FORM_TEXT = {"const": "", "log2": "log2(p/2)", "ceil_log2": "(ceil(log2 p)-1)", "lin": "(p-2)"}
PMODEL_DTYPE = np.dtype([
    ("primitive", "S16"), ("regime", "i4"), ("n_regimes", "i4"),
    ("lo", "f8"), ("hi", "f8"), ("m0", "f8"),             # applies to lo <= m < hi; T measured from m0
    ("ts_form", "S12"), ("ts_a", "f8"), ("ts_b", "f8"),   # ts(p) = ts_a + ts_b (F(p) - F(2))
    ("tw_form", "S12"), ("tw_a", "f8"), ("tw_b", "f8"),   # tw(p) = tw_a + tw_b (G(p) - G(2))
    ("npts", "i4"), ("p_min", "i4"), ("p_max", "i4"), ("n_p", "i4"),   # points and measured p fitted
    ("m_first", "f8"), ("aicc", "f8"),
])


def form_values(form: str, p) -> np.ndarray:
    """F(p) - F(2) of one of FORMS, vectorised: 0 at p = 2 for every form."""
    x = np.asarray(p, dtype=float)
    if form == "const":
        return np.zeros_like(x)
    if form == "log2":
        return np.log2(x) - 1.0
    if form == "ceil_log2":
        return np.ceil(np.log2(x) - 1e-9) - 1.0
    if form == "lin":
        return x - 2.0
    raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")


@dataclass(frozen=True)
class PModel:
    """One primitive's (p, m) model: its regimes' bounds and coefficients (PMODEL_DTYPE rows)."""

    bounds: np.ndarray        # interior boundaries
    m0: np.ndarray
    ts_form: tuple[str, ...]
    ts_a: np.ndarray
    ts_b: np.ndarray
    tw_form: tuple[str, ...]
    tw_a: np.ndarray
    tw_b: np.ndarray
    start: float              # the smallest size fitted (a cold curve's warm one applies below)

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> PModel:
        rows = np.sort(rows, order="regime")
        text = lambda a: tuple(v.decode() if isinstance(v, bytes) else str(v) for v in a)  # noqa: E731
        return cls(np.asarray(rows["lo"][1:], float), rows["m0"].astype(float), text(rows["ts_form"]),
                   rows["ts_a"].astype(float), rows["ts_b"].astype(float), text(rows["tw_form"]),
                   rows["tw_a"].astype(float), rows["tw_b"].astype(float), float(rows["m_first"][0]))

    def regimes_at(self, p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(interior bounds, ts, tw) per regime at process count ``p``: a Hockney curve."""
        F = np.array([form_values(f, p) for f in self.ts_form])
        G = np.array([form_values(f, p) for f in self.tw_form])
        tw = self.tw_a + self.tw_b * G
        return self.bounds, self.ts_a + self.ts_b * F - tw * self.m0, tw

    def predict(self, p, m) -> np.ndarray:
        """Seconds at each (p, m) pair (broadcast together), vectorised."""
        p, m = np.broadcast_arrays(np.asarray(p, float), np.asarray(m, float))
        i = np.searchsorted(self.bounds, m, side="right")
        F = np.stack([form_values(f, p) for f in FORMS])
        fi = np.array([FORMS.index(f) for f in self.ts_form])[i]
        gi = np.array([FORMS.index(f) for f in self.tw_form])[i]
        F_at = np.take_along_axis(F, fi[None], axis=0)[0]
        G_at = np.take_along_axis(F, gi[None], axis=0)[0]
        return self.ts_a[i] + self.ts_b[i] * F_at + (self.tw_a[i] + self.tw_b[i] * G_at) * (m - self.m0[i])


def models_from_rows(rows: np.ndarray | None) -> dict[str, PModel]:
    """Primitive -> its PModel from stored PMODEL_DTYPE rows ({} for None or none)."""
    if rows is None or not len(rows):
        return {}
    rows = np.asarray(rows).astype(PMODEL_DTYPE)
    return {p.decode(): PModel.from_rows(rows[rows["primitive"] == p]) for p in np.unique(rows["primitive"])}


__all__ = ["FORMS", "FORM_TEXT", "PMODEL_DTYPE", "PModel", "form_values", "models_from_rows"]

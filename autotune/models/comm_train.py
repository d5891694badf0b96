"""Trains of messages one rank sends back to back (the distributed LU's panel to every other rank):
LoOgGP in the message bands where its held-out error on the probe's PRTT runs beats Hockney's,
Hockney elsewhere (docs/models.md#comm.loggp)."""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from autotune.db.comm_lookup import CommParams
from autotune.db.store import kept_with

from .comm_fit import LoOgGP, loggp_heldout

# Message bands the two models are compared and chosen in (bytes: [lo, hi)).
BANDS = ((0, 4096, "< 4 KiB"), (4096, 1 << 18, "4-256 KiB"), (1 << 18, 1 << 22, "0.25-4 MiB"),
         (1 << 22, np.inf, ">= 4 MiB"))


@dataclass(frozen=True)
class TrainChoice:
    """Per band: the held-out median errors on PRTT(n,0,s) and whether LoOgGP prices trains there."""

    model: LoOgGP
    loggp_err: tuple[float, ...]
    hockney_err: tuple[float, ...]

    @property
    def loggp_bands(self) -> np.ndarray:
        """Per band: LoOgGP's error is the lower (a band without held-out sizes keeps Hockney)."""
        return np.array([lg < hk for lg, hk in zip(self.loggp_err, self.hockney_err, strict=True)])

    def uses_loggp(self, nbytes) -> np.ndarray:
        return self.loggp_bands[band_of(nbytes)]


def band_of(nbytes) -> np.ndarray:
    edges = np.array([b[1] for b in BANDS[:-1]], dtype=float)
    return np.searchsorted(edges, np.asarray(nbytes, dtype=float), side="right")


def compare(prtt, pingpong, fits=None) -> dict:
    """Per band, the median held-out error of LoOgGP and Hockney on one round trip and on a train
    (``comm_fit.loggp_heldout``), NaN where the band has no held-out size."""
    held = loggp_heldout(prtt, pingpong, fits)
    where = band_of(held["nbytes"])
    out = {}
    for key in ("loggp_one", "hockney_one", "loggp_train", "hockney_train"):
        out[key] = tuple(float(np.median(held[key][where == i])) if (where == i).any() else float("nan")
                         for i in range(len(BANDS)))
    out["sizes"] = tuple(int((where == i).sum()) for i in range(len(BANDS)))
    return out


_CHOICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # CommParams -> its TrainChoice


def choice(cp: CommParams) -> TrainChoice | None:
    """The platform's choice (kept with its CommParams); None without LoOgGP or its PRTT runs."""
    return kept_with(cp, _CHOICES, lambda: _choose(cp))


def _choose(cp: CommParams) -> TrainChoice | None:
    model = LoOgGP.of(getattr(cp, "loggp", None))
    prtt = getattr(cp, "prtt", None)
    if model is None or prtt is None or len(prtt) < 4:
        return None
    pts = cp.points("pingpong")
    cmp = compare(prtt, (pts["nbytes"], pts["t_mean"]), cp.fits)
    return TrainChoice(model, tuple(np.nan_to_num(cmp["loggp_train"], nan=np.inf)), cmp["hockney_train"])


def train_time(cp: CommParams, k, nbytes, hockney) -> np.ndarray:
    """Seconds until the last of ``k`` messages of ``nbytes`` one rank sends back to back has
    arrived: LoOgGP's ``one_way + (k - 1) gap`` where it is the better model, else ``hockney``
    (the caller's Hockney price of the same train, an array over ``nbytes``)."""
    ch = choice(cp)
    if ch is None:
        return np.asarray(hockney, dtype=float)
    return np.where(ch.uses_loggp(nbytes), ch.model.train(k, nbytes), hockney)


__all__ = ["BANDS", "TrainChoice", "band_of", "choice", "compare", "train_time"]

"""The first evaluated step at which a series crosses a bound: tau, the loss and z-usage
onsets, the transition window's end (mbc.diagnostics.summary), the live `tau` event of a training run
(mbc.training.train), the calibration run of mbc.estimate and the re-thresholded taus of
threshold_sensitivity.csv (mbc.analysis.fit_tables) are all this one definition. Which rows it reads
(the evaluation grid, `mbc.core.spec.grid_mask`) is the caller's choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DIRECTIONS = ("below", "above")


def first_crossing(
    steps: Sequence[int] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    bound: float,
    direction: str = "below",
) -> int | None:
    """First of `steps` whose value is strictly below (`direction="below"`) or strictly
    above (`"above"`) `bound`; None when none is (a censored run). Equality is not a
    crossing and NaN (not measured) never crosses.

    steps: evaluated optimiser steps, strictly increasing; values: the series at them.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction = {direction!r}: expected one of {DIRECTIONS}")
    st = np.asarray(steps).ravel()
    v = np.asarray(values, dtype=float).ravel()
    if st.size != v.size:
        raise ValueError(f"steps has {st.size} entries, values has {v.size}")
    if st.size > 1 and not np.all(np.diff(st) > 0):
        raise ValueError("steps must be strictly increasing")
    if math.isnan(bound):
        raise ValueError("bound is NaN: nothing would ever cross it")
    hit = np.flatnonzero(v < bound if direction == "below" else v > bound)
    return int(st[hit[0]]) if hit.size else None

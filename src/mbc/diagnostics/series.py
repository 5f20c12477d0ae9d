"""Statistics of one loss series against its steps (docs/method.md#metrics): the E11 dip
duration, the transition window, the z-usage onset and the plateau window and height. Every
crossing is the first evaluated step strictly past its mark (`mbc.core.crossing`). The run
summaries (`mbc.diagnostics.summary`) read them on our evaluation, and on the author's logged
series (`mbc.diagnostics.logged`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from mbc.core.crossing import first_crossing

# `dip_duration`'s columns (E11), read on our evaluation and, suffixed _sampled, on his
DIP_COLUMNS = ("dip_start", "dip_end", "dip_duration", "dip_censored", "dip_bound")


def dip_duration(
    steps: np.ndarray, lcand: np.ndarray, log_k: float, start_fraction: float, end_nats: float
) -> dict:
    """The author's E11 duration (his analysis script, spec section 7): from the first
    evaluation with L_cand < start_fraction * log K (the first dip below log K) to the first
    with L_cand < end_nats, an absolute loss in nats (not a fraction of log K).

    Censored when L_cand never falls below end_nats; then `dip_bound`, the steps since the
    dip (a lower bound on the duration), when the run has dipped, else None."""
    start = first_crossing(steps, lcand, start_fraction * log_k)
    end = first_crossing(steps, lcand, end_nats)
    if end is not None and start is None:  # below end_nats < log K: dipped at or before it
        start = end
    censored = end is None
    bound = None
    if censored and start is not None and steps.size:
        bound = int(steps[-1]) - start
    return {
        "dip_start": start,
        "dip_end": end,
        "dip_duration": None if censored else end - start,
        "dip_censored": censored,
        "dip_bound": bound,
    }


def last_step_above_before(
    steps: np.ndarray, values: np.ndarray, bound: float, before: int
) -> int | None:
    """Last step < `before` whose value is strictly above `bound`; None when none is."""
    hit = np.flatnonzero((values > bound) & (steps < before))
    return int(steps[hit[-1]]) if hit.size else None


def transition_window(
    steps: np.ndarray, lcand: np.ndarray, log_k: float, start_fraction: float, end_fraction: float
) -> tuple[int | None, int | None]:
    """The author's transition window (t_start, t_end): t_end is the first evaluation with
    L_cand < end_fraction * log K, t_start the last evaluation before it with
    L_cand > start_fraction * log K. (None, None) when the run never reaches t_end."""
    t_end = first_crossing(steps, lcand, end_fraction * log_k)
    if t_end is None:
        return None, None
    return last_step_above_before(steps, lcand, start_fraction * log_k, t_end), t_end


def z_usage_onset(steps: np.ndarray, delta_z: np.ndarray, threshold: float) -> int | None:
    """First step with delta_z above `threshold`; None also when delta_z was never measured."""
    if not np.isfinite(delta_z).any():
        return None
    return first_crossing(steps, delta_z, threshold, "above")


class Plateau(NamedTuple):
    start: float  # the window is [start, end) in steps
    end: float
    n_evals: int  # evaluations inside the window
    height: float  # mean L_cand over them (NaN when there are none)


def plateau(
    steps: np.ndarray,
    lcand: np.ndarray,
    log_k: float,
    *,
    start_fraction: float,
    onset_fraction: float,
    z_onset: int | None = None,
) -> Plateau:
    """The plateau window [start_fraction * end, end) and the mean L_cand over it.

    end: the first sign of the transition, i.e. the loss onset (first step with
    L_cand < onset_fraction * log K) or, when given and earlier, the z-usage onset (first
    step with delta_z above its threshold): once the model reads z it has left the
    marginal solution. A run that never leaves the plateau uses every step.
    start: start_fraction * end (at least step 1), past the first updates.
    height: the time mean of L_cand over the evaluations inside the window (`time_mean`).
    """
    onset = first_crossing(steps, lcand, onset_fraction * log_k)
    ends = [s for s in (onset, z_onset) if s is not None]
    end = min(ends) if ends else steps[-1] + 1
    start = max(1, start_fraction * end)
    window = (steps >= start) & (steps < end)
    return Plateau(
        float(start), float(end), int(window.sum()), time_mean(steps[window], lcand[window])
    )


def time_mean(steps: np.ndarray, values: np.ndarray) -> float:
    """Mean of a curve over the steps it spans (trapezoid rule), so that evaluations packed
    densely near the transition (eval.dense_every) weigh only the steps they cover."""
    if steps.size == 0:
        return math.nan
    if steps.size == 1 or steps[-1] == steps[0]:
        return float(values.mean())
    v, s = values.astype(float), steps.astype(float)
    return float(((v[1:] + v[:-1]) / 2 * np.diff(s)).sum() / (s[-1] - s[0]))


def configured_plateau(
    window, steps: np.ndarray, lcand: np.ndarray, log_k: float, z_onset: int | None
) -> Plateau:
    """`plateau` with the fractions of `diagnostics.plateau` (`window`,
    `mbc.diagnostics.config_sections.Plateau`), ended at `z_onset` (None: the loss onset alone): the run
    summaries and the sensitivity table read one window definition."""
    return plateau(
        steps,
        lcand,
        log_k,
        start_fraction=window.start_fraction,
        onset_fraction=window.onset_fraction,
        z_onset=z_onset,
    )


def plateau_height(steps: np.ndarray, lcand: np.ndarray, log_k: float, **window) -> float:
    """Mean L_cand over the plateau window (see `plateau` for the window's keywords)."""
    return plateau(steps, lcand, log_k, **window).height

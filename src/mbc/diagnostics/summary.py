"""Per-run summaries from the tidy metrics table (docs/method.md#metrics): tau, censoring,
plateau.

tau is the first evaluated step with L_cand < threshold * log K (`mbc.core.crossing`, like
every onset here). A run that never crosses is censored: tau is missing (never a number)
and `steps` is the budget it survived, which is what a censored fit needs.

A run that diverged (`mbc.core.divergence`: the trainer stopped it there) is not censored:
`status` is `diverged`, `diverged_step` the step, `steps` too; every censoring flag is
false, since it survived no budget. What it measured before it diverged (tau, onsets,
plateau) is kept, read from the rows before that step; its final values are null. How the
analysis treats it is config `diverged:` (mbc.analysis.diverged).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from mbc.core.config import Run
from mbc.core.crossing import first_crossing
from mbc.core.divergence import bound, divergence
from mbc.core.sections import Lead, Summary
from mbc.core.spec import DOTTED_COLUMNS, FLAT_COLUMNS, RunSpec, grid_mask, spec_columns

# `dip_duration`'s columns (E11), read on our evaluation and, suffixed _sampled, on his
DIP_COLUMNS = ("dip_start", "dip_end", "dip_duration", "dip_censored", "dip_bound")
# the run's spec (mbc.core.spec: its flat names first; the dotted ones close the table)
TAU_COLUMNS = [
    "run_id",
    "experiment",
    *FLAT_COLUMNS,
    "threshold",
    "status",
    "diverged",
    "diverged_step",
    "tau",
    "censored",
    "plateau_height",
    "height_over_log_k",
    "final_candidate_loss",
    "final_candidate_accuracy",
    "steps",
    "loss_onset",
    "delta_z_onset",
    "lead",
    "lead_fraction",
    # the author's statistics (docs/method.md#author-statistics): first-target tau, the
    # transition window (last L_cand > 0.95 log K -> first L_cand < 0.05 log K), the lead
    # on the first-target loss
    "first_target_tau",
    "first_target_censored",
    "transition_start",
    "transition_end",
    "transition_duration",
    "transition_censored",
    "transition_bound",
    "first_target_loss_onset",
    "delta_z_first_onset",
    "lead_first",
    "lead_fraction_first",
    # E11's duration (diagnostics.dip): first L_cand < log K -> first L_cand < 0.5 nats
    *DIP_COLUMNS,
    # the author's lead as he computed it, from the training log (train_log.csv): onsets of
    # the windows' running-mean L1 and of (last batch's shuffled L1 - running mean)
    "log_loss_onset",
    "log_delta_z_onset",
    "lead_log",
    "lead_fraction_log",
    "lead_log_measured",
    "lead_log_shuffle",
    # the author's other training-log statistics: E12's transition (the running-mean L1 on
    # the training labels, which carry the label noise, first below the first-target
    # threshold) and E14's lag (first window below lag.fraction x the first window's L1)
    "first_target_tau_log",
    "first_target_log_censored",
    "lag_step",
    "lag_censored",
    # candidate tau on the author's sampled evaluation (eval.sampled_groups; train_log.csv),
    # the series his D-law tau read (E1-E5); a censored run's bound only where it ran its
    # budget (a run stopped at our tau's early stop bounds nothing)
    "tau_sampled",
    "tau_sampled_censored",
    "tau_sampled_bound",
    # E6's window on the same sampled evaluation
    "transition_start_sampled",
    "transition_end_sampled",
    "transition_duration_sampled",
    "transition_sampled_censored",
    # E11's duration on the same sampled evaluation, the series his analysis read
    *(f"{c}_sampled" for c in DIP_COLUMNS),
    # E13: the first-target loss at the end of training (a z-blind model: exactly log K)
    "final_first_target_loss",
    *DOTTED_COLUMNS,
]
INT_COLUMNS = [
    "diverged_step",
    "tau",
    "loss_onset",
    "delta_z_onset",
    "lead",
    "first_target_tau",
    "transition_start",
    "transition_end",
    "transition_duration",
    "transition_bound",
    "first_target_loss_onset",
    "delta_z_first_onset",
    "lead_first",
    "dip_start",
    "dip_end",
    "dip_duration",
    "dip_bound",
    "log_loss_onset",
    "log_delta_z_onset",
    "lead_log",
    "first_target_tau_log",
    "lag_step",
    "tau_sampled",
    "tau_sampled_bound",
    "transition_start_sampled",
    "transition_end_sampled",
    "transition_duration_sampled",
    "dip_start_sampled",
    "dip_end_sampled",
    "dip_duration_sampled",
    "dip_bound_sampled",
]


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


def plateau_height(steps: np.ndarray, lcand: np.ndarray, log_k: float, **window) -> float:
    """Mean L_cand over the plateau window (see `plateau` for the window's keywords)."""
    return plateau(steps, lcand, log_k, **window).height


def logged_lead(train_log: pd.DataFrame | None, log_k: float, lead_cfg: Lead) -> dict:
    """The author's lead (his posthoc script over the training log, spec section 7): on the
    logged windows (`mbc.training.train_log`), loss onset = first window whose running-mean
    L1 < loss_onset_fraction * log K, z onset = first window whose delta_z (last batch's
    shuffled L1 - the running mean) > delta_z_onset nats; lead = loss onset - z onset,
    fraction = lead / loss onset. The shuffle is his (z from another example of the batch,
    `delta_z_train_first_batch`) where the log has it, else ours (a wrong z of the group,
    `delta_z_train_first`, logs written before his was): `lead_log_shuffle` says which.
    Not measured (`lead_log_measured` false, every value None) without a training log or
    when its trainer did not log the series."""
    none = dict.fromkeys(
        ["log_loss_onset", "log_delta_z_onset", "lead_log", "lead_fraction_log", "lead_log_shuffle"]
    )
    if train_log is None or train_log.empty:
        return {**none, "lead_log_measured": False}
    t = train_log.sort_values("step")
    l1 = t["train_first_loss"].to_numpy(float)
    shuffle, dz = "batch", t.get("delta_z_train_first_batch")
    if dz is None or not np.isfinite(dz.to_numpy(float)).any():
        shuffle, dz = "deranged", t["delta_z_train_first"]
    dz = dz.to_numpy(float)
    if not np.isfinite(l1).any() or not np.isfinite(dz).any():
        return {**none, "lead_log_measured": False}
    steps = t["step"].to_numpy()
    loss_onset = first_crossing(steps, l1, lead_cfg.loss_onset_fraction * log_k)
    z_onset = z_usage_onset(steps, dz, lead_cfg.delta_z_onset)
    lead = None if loss_onset is None or z_onset is None else loss_onset - z_onset
    return {
        "log_loss_onset": loss_onset,
        "log_delta_z_onset": z_onset,
        "lead_log": lead,
        "lead_fraction_log": None if lead is None or not loss_onset else lead / loss_onset,
        "lead_log_measured": True,
        "lead_log_shuffle": shuffle,
    }


def logged_statistics(
    train_log: pd.DataFrame | None, log_k: float, diag: Summary, threshold: float = 0.5
) -> dict:
    """The author's per-run statistics read off the training log (spec section 7):
    E12's transition, the first window whose running-mean L1 on the training labels is
    below first_target.threshold log K (`first_target_tau_log`; censored when none is); E14's
    lag (`compute_lag_metric`), the first window whose running-mean L1 is below lag.fraction
    x the first window's; on the sampled evaluation (`candidate_loss_sampled`,
    eval.sampled_groups), the series the author read for them: candidate tau, its first
    value below `threshold` log K (`tau_sampled`, E1-E5's D-law), E6's transition window
    (diagnostics.transition's marks; no duration where no evaluation before t_end lies above
    the start mark, as his script drops such a run) and E11's dip duration (`dip_duration`,
    suffix _sampled).
    A log without the series leaves each statistic None and not censored."""
    out: dict = {
        "first_target_tau_log": None,
        "first_target_log_censored": False,
        "lag_step": None,
        "lag_censored": False,
        "tau_sampled": None,
        "tau_sampled_censored": False,
        "transition_start_sampled": None,
        "transition_end_sampled": None,
        "transition_duration_sampled": None,
        "transition_sampled_censored": False,
        **{f"{c}_sampled": None for c in DIP_COLUMNS},
        "dip_censored_sampled": False,
    }
    if train_log is None or train_log.empty:
        return out
    t = train_log.sort_values("step")
    steps = t["step"].to_numpy()
    l1 = t["train_first_loss"].to_numpy(float)
    if np.isfinite(l1).any():
        first = first_crossing(steps, l1, diag.first_target_threshold * log_k)
        ok = np.isfinite(l1)
        lag = first_crossing(steps[ok], l1[ok], diag.lag.fraction * float(l1[ok][0]))
        out.update(
            first_target_tau_log=first,
            first_target_log_censored=first is None,
            lag_step=lag,
            lag_censored=lag is None,
        )
    sampled = t.get("candidate_loss_sampled")
    if sampled is not None and np.isfinite(sampled.to_numpy(float)).any():
        ok = np.isfinite(sampled.to_numpy(float))
        s_steps, lc = steps[ok], sampled.to_numpy(float)[ok]
        win = diag.transition
        start, end = transition_window(s_steps, lc, log_k, win.start_fraction, win.end_fraction)
        tau_sampled = first_crossing(s_steps, lc, threshold * log_k)
        out.update(tau_sampled=tau_sampled, tau_sampled_censored=tau_sampled is None)
        # never above the start mark before t_end: the author's analyze_lr_sweep.py marks
        # the run no_transition and leaves it out, so it has no duration (and no bound)
        out.update(
            transition_start_sampled=start,
            transition_end_sampled=end,
            transition_duration_sampled=None if end is None or start is None else end - start,
            transition_sampled_censored=end is None,
        )
        dip = dip_duration(s_steps, lc, log_k, diag.dip.start_fraction, diag.dip.end_nats)
        out.update({f"{c}_sampled": v for c, v in dip.items()})
    return out


def summarize_run(
    spec: RunSpec, metrics: pd.DataFrame, diag: Summary, train_log: pd.DataFrame | None = None
) -> dict:
    """One run's summary: tau (or censored), plateau height, lead of delta_z over the loss.
    Every statistic reads the rows on the evaluation grid (`mbc.core.spec.grid_mask`) and,
    for a diverged run, before the step where it diverged (`diverged_step`); the author's
    logged lead reads `train_log` (train_log.csv; None: not measured)."""
    m = metrics.sort_values("step")
    dstep = diverged_step(spec, m)
    if dstep is not None:
        m = m[m["step"] < dstep]
    m = m[grid_mask(spec.eval, m["step"].to_numpy())]
    steps = m["step"].to_numpy()
    lcand = m["candidate_loss"].to_numpy()
    log_k = spec.task.log_k
    tau = first_crossing(steps, lcand, spec.eval.threshold * log_k)
    plat, lead_cfg = diag.plateau, diag.lead
    loss_onset = first_crossing(steps, lcand, lead_cfg.loss_onset_fraction * log_k)
    dz = m["delta_z"].to_numpy()
    dz_onset = z_usage_onset(steps, dz, lead_cfg.delta_z_onset)
    height = plateau_height(
        steps,
        lcand,
        log_k,
        start_fraction=plat.start_fraction,
        onset_fraction=plat.onset_fraction,
        z_onset=dz_onset if plat.end_at_z_onset else None,
    )
    lead = None if loss_onset is None or dz_onset is None else loss_onset - dz_onset
    author = author_statistics(steps, m, log_k, diag)
    out = {
        "run_id": spec.run_id,
        "status": "crossed" if tau is not None else "censored",
        "diverged": False,
        "diverged_step": None,
        "tau": tau,
        "censored": tau is None,
        "threshold": spec.eval.threshold,
        "plateau_height": height,
        "height_over_log_k": height / log_k,
        "final_candidate_loss": float(lcand[-1]),
        "final_candidate_accuracy": float(m["candidate_accuracy"].iloc[-1]),
        "steps": int(steps[-1]),
        "loss_onset": loss_onset,
        "delta_z_onset": dz_onset,
        "lead": lead,
        "lead_fraction": None if lead is None or not loss_onset else lead / loss_onset,
        **author,
        **logged_lead(train_log, log_k, lead_cfg),
        **logged_statistics(train_log, log_k, diag, spec.eval.threshold),
        "final_first_target_loss": float(m["first_target_loss"].iloc[-1]),
    }
    # a censored sampled tau is bounded by the budget only where the run ran it all
    ran_budget = int(steps[-1]) >= spec.train.max_steps
    out["tau_sampled_bound"] = (
        int(steps[-1]) if out["tau_sampled_censored"] and ran_budget else None
    )
    if dstep is not None:  # not censored: it survived no budget (module docstring)
        out.update(
            status="diverged",
            diverged=True,
            diverged_step=dstep,
            steps=dstep,
            censored=False,
            first_target_censored=False,
            transition_censored=False,
            transition_bound=None,
            final_candidate_loss=None,
            final_candidate_accuracy=None,
            final_first_target_loss=None,
            first_target_log_censored=False,
            lag_censored=False,
            transition_sampled_censored=False,
            tau_sampled_censored=False,
            tau_sampled_bound=None,
        )
    return out


def diverged_step(spec: RunSpec, metrics: pd.DataFrame) -> int | None:
    """The first evaluated step whose row shows divergence (`mbc.core.divergence`, the
    trainer's own test, so this is where it stopped the run); None when none does."""
    limit = bound(spec.train)
    for row in metrics.sort_values("step").to_dict("records"):
        if divergence(row, limit):
            return int(row["step"])
    return None


def author_statistics(steps: np.ndarray, m: pd.DataFrame, log_k: float, diag: Summary) -> dict:
    """The per-run quantities the author's headline numbers were computed from
    (docs/method.md#author-statistics), beside our uniform candidate-tau ones: first-target
    tau (L1 < threshold * log K), the transition window and its duration, and the lead on
    the first-target loss
    (delta_z_first onset vs the first evaluation with L1 < loss_onset_fraction * log K)."""
    lcand, l1 = m["candidate_loss"].to_numpy(), m["first_target_loss"].to_numpy()
    first_tau = first_crossing(steps, l1, diag.first_target_threshold * log_k)
    win = diag.transition
    t_start, t_end = transition_window(steps, lcand, log_k, win.start_fraction, win.end_fraction)
    if t_end is not None and t_start is None:
        t_start = int(steps[0])  # never above the start mark: the window opens at the start
    # A run without t_end whose L_cand has left the start mark for good is inside its
    # window: its duration is at least the steps since the last evaluation above the mark.
    # One still above it has not opened the window: no bound (left out of duration fits).
    bound = None
    start_mark = win.start_fraction * log_k
    if t_end is None and lcand.size and lcand[-1] <= start_mark:
        last_above = last_step_above_before(steps, lcand, start_mark, int(steps[-1]) + 1)
        bound = int(steps[-1]) - (int(steps[0]) if last_above is None else last_above)
    lead_cfg = diag.lead
    l1_onset = first_crossing(steps, l1, lead_cfg.loss_onset_fraction * log_k)
    dz1 = m["delta_z_first"].to_numpy(float) if "delta_z_first" in m else np.full(len(m), np.nan)
    dz1_onset = z_usage_onset(steps, dz1, lead_cfg.delta_z_onset)
    lead = None if l1_onset is None or dz1_onset is None else l1_onset - dz1_onset
    return {
        "first_target_tau": first_tau,
        "first_target_censored": first_tau is None,
        "transition_start": t_start,
        "transition_end": t_end,
        "transition_duration": None if t_end is None else t_end - t_start,
        "transition_censored": t_end is None,
        "transition_bound": bound,
        "first_target_loss_onset": l1_onset,
        "delta_z_first_onset": dz1_onset,
        "lead_first": lead,
        "lead_fraction_first": None if lead is None or not l1_onset else lead / l1_onset,
        **dip_duration(steps, lcand, log_k, diag.dip.start_fraction, diag.dip.end_nats),
    }


def run_columns(run: Run) -> dict:
    """The descriptive columns of one (experiment, run) row: every field of its spec."""
    return {"run_id": run.run_id, "experiment": run.experiment, **spec_columns(run.spec)}


def tau_table(runs: list[Run], summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per (experiment, run): results/tau.csv."""
    # a summary written before divergence, or a statistic of the author's, was recorded:
    # not diverged, and that statistic not measured (not censored: a fit leaves it out)
    old = {
        "status": None,
        "diverged": False,
        "diverged_step": None,
        **dict.fromkeys(
            (
                "first_target_log_censored",
                "lag_censored",
                "tau_sampled_censored",
                "transition_sampled_censored",
                "dip_censored_sampled",
            ),
            False,
        ),
    }
    rows = [{**run_columns(r), **old, **summaries[r.run_id]} for r in runs]
    df = pd.DataFrame(rows, columns=TAU_COLUMNS)
    df["status"] = df["status"].fillna(df["censored"].map(lambda c: "censored" if c else "crossed"))
    for c in INT_COLUMNS:  # nullable: censored and diverged runs have no tau
        df[c] = df[c].astype("Int64")
    return df

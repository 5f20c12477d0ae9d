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

import numpy as np
import pandas as pd

from mbc.core.config_loader import Run
from mbc.core.crossing import first_crossing
from mbc.core.divergence import bound, divergence
from mbc.core.spec import DOTTED_COLUMNS, FLAT_COLUMNS, RunSpec, grid_mask, spec_columns
from mbc.core.spec import NUMERIC_COLUMNS as SPEC_NUMERIC_COLUMNS
from mbc.diagnostics.config_sections import Summary
from mbc.diagnostics.logged import NOT_MEASURED, logged_lead, logged_statistics, sampled_bound
from mbc.diagnostics.series import (
    DIP_COLUMNS,
    configured_plateau,
    dip_duration,
    last_step_above_before,
    transition_window,
    z_usage_onset,
)

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
# tau.csv's columns that hold no number: text, and flags (True/False); every other is a number
# (the spec's own: `mbc.core.spec.NUMERIC_COLUMNS`), what a reader casts (`NUMBER_COLUMNS`)
TEXT_COLUMNS = [
    "run_id",
    "experiment",
    "task",
    "model",
    "init",
    "sharing",
    "status",
    "lead_log_shuffle",
]
FLAG_COLUMNS = [c for c in TAU_COLUMNS if c in ("diverged", "lead_log_measured") or "censored" in c]
NUMBER_COLUMNS = [
    c
    for c in TAU_COLUMNS
    if c in SPEC_NUMERIC_COLUMNS
    or c not in {*FLAT_COLUMNS, *DOTTED_COLUMNS, *TEXT_COLUMNS, *FLAG_COLUMNS}
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
    height = configured_plateau(
        plat, steps, lcand, log_k, dz_onset if plat.end_at_z_onset else None
    ).height
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
    out["tau_sampled_bound"] = sampled_bound(
        out["tau_sampled_censored"], int(steps[-1]), spec.train.max_steps
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
    old = {"status": None, "diverged": False, "diverged_step": None, **NOT_MEASURED}
    rows = [{**run_columns(r), **old, **summaries[r.run_id]} for r in runs]
    df = pd.DataFrame(rows, columns=TAU_COLUMNS)
    df["status"] = df["status"].fillna(df["censored"].map(lambda c: "censored" if c else "crossed"))
    for c in INT_COLUMNS:  # nullable: censored and diverged runs have no tau
        df[c] = df[c].astype("Int64")
    return df

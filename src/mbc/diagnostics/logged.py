"""The author's per-run statistics read off the training log (`train_log.csv`,
`mbc.training.author_log`; spec section 7): his lead, E12's transition, E14's lag, and, on his
sampled evaluation, candidate tau, E6's window and E11's duration. A run whose log lacks a
series has that statistic not measured (None, and not censored).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mbc.core.crossing import first_crossing
from mbc.diagnostics.config_sections import Lead, Summary
from mbc.diagnostics.series import DIP_COLUMNS, dip_duration, transition_window, z_usage_onset

# `logged_statistics` of a log without its series (or a summary written before one existed)
NOT_MEASURED: dict = {
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


def logged_lead(train_log: pd.DataFrame | None, log_k: float, lead_cfg: Lead) -> dict:
    """The author's lead (his posthoc script over the training log, spec section 7): on the
    logged windows (`mbc.training.author_log`), loss onset = first window whose running-mean
    L1 < loss_onset_fraction * log K, z onset = first window whose delta_z (last batch's
    shuffled L1 - the running mean) > delta_z_onset nats; lead = loss onset - z onset,
    fraction = lead / loss onset. The shuffle is his (z from another example of the batch,
    `delta_z_train_first_batch`) where the log has it, else ours (a wrong z of the group,
    `delta_z_train_first`, logs written before his was, or only partly with it):
    `lead_log_shuffle` says which.
    Not measured (`lead_log_measured` false, every value None) without a training log or
    when its trainer did not log the series."""
    none = dict.fromkeys(
        ["log_loss_onset", "log_delta_z_onset", "lead_log", "lead_fraction_log", "lead_log_shuffle"]
    )
    if train_log is None or train_log.empty:
        return {**none, "lead_log_measured": False}
    t = train_log.sort_values("step")
    l1 = t["train_first_loss"].to_numpy(float)
    ours = t["delta_z_train_first"].to_numpy(float)
    his = t.get("delta_z_train_first_batch")
    his = np.full(len(t), np.nan) if his is None else his.to_numpy(float)
    # his only where logged at every window ours is (a run resumed from an older trainer has
    # early windows without it, where an onset would be missed)
    whole = np.isfinite(his).any() and np.isfinite(his[np.isfinite(ours)]).all()
    shuffle, dz = ("batch", his) if whole else ("deranged", ours)
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


def sampled_series(train_log: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, L_cand) of the author's sampled evaluation in a training log, in step order,
    at the windows that scored it; None where the log has none (not measured)."""
    if train_log is None or "candidate_loss_sampled" not in train_log:
        return None
    t = train_log.sort_values("step")
    values = t["candidate_loss_sampled"].to_numpy(float)
    ok = np.isfinite(values)
    return (t["step"].to_numpy()[ok], values[ok]) if ok.any() else None


def sampled_bound(censored: bool, last_step: int, max_steps) -> int | None:
    """The bound of a censored sampled tau: the run's last step, only where the run ran its
    whole budget (a run stopped at our tau's early stop bounds nothing; an unknown budget,
    None, neither)."""
    ran_budget = max_steps is not None and pd.notna(max_steps) and last_step >= int(max_steps)
    return int(last_step) if censored and ran_budget else None


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
    A log without the series leaves each statistic None and not censored (`NOT_MEASURED`)."""
    out = dict(NOT_MEASURED)
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
    if (sampled := sampled_series(t)) is not None:
        s_steps, lc = sampled
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

"""The plateau's height under other window ends (docs/method.md#plateau-height): how much of the
summaries' plateau height depends on where its window ends. The summaries' own window is
`mbc.diagnostics.series.configured_plateau`; this table repeats it run by run."""

from __future__ import annotations

import math

import pandas as pd

from mbc.diagnostics.config_sections import PlateauSensitivity, Summary
from mbc.diagnostics.series import configured_plateau, z_usage_onset

PLATEAU_SENSITIVITY_COLUMNS = [
    "experiment",
    "run_id",
    "k",
    "d",
    "seed",
    "window_end",
    "delta_z_onset",
    "primary",
    "window_start",
    "window_stop",
    "n_evals",
    "height_over_log_k",
    "in_band",
    "band_low",
    "band_high",
]
LOSS_ONSET_ONLY = "loss onset only"


def plateau_sensitivity(
    cfg: PlateauSensitivity, diag: Summary, tau: pd.DataFrame, metrics: pd.DataFrame
) -> pd.DataFrame:
    """Plateau height / log K of every run of `cfg.experiments` under other window ends.

    The run summaries end the window where `diagnostics.plateau` says (by default the
    z-usage onset at delta_z > `diagnostics.lead.delta_z_onset`). A model that starts to
    read z can rank the candidates worse than uniform for a while (L_cand above log K)
    before the loss falls, so where the window ends decides how much of that enters the
    height. This table repeats the measurement with the window ended by the z-usage onset
    at each threshold of `cfg.delta_z_onsets`, and by the loss onset alone; the row
    that reproduces the summaries is marked `primary`. `in_band`: height / log K within
    `cfg.band`.
    """
    plat = diag.plateau
    primary = diag.lead.delta_z_onset if plat.end_at_z_onset else None
    thresholds = {float(t) for t in cfg.delta_z_onsets} | ({primary} if primary else set())
    ends = [(f"delta_z > {t:g}", t) for t in sorted(thresholds)]
    ends.append((LOSS_ONSET_ONLY, None))
    lo, hi = cfg.band
    rows = tau[tau["experiment"].isin(cfg.experiments) & (tau["model"] == "transformer")]
    if "diverged" in rows:  # a diverged run has no plateau to measure (its rows end in NaN)
        rows = rows[~rows["diverged"].astype(str).str.lower().isin(["true", "1"])]
    by_run = {r: m.sort_values("step") for r, m in metrics.groupby("run_id")}
    out = []
    for _, r in rows.iterrows():
        m = by_run.get(r.run_id)
        if m is None:
            raise ValueError(f"metrics.csv has no rows for run {r.run_id} (listed in tau.csv)")
        steps, lcand = m["step"].to_numpy(), m["candidate_loss"].to_numpy()
        dz = m["delta_z"].to_numpy()
        log_k = math.log(int(r.k))
        for label, thr in ends:
            z_onset = None if thr is None else z_usage_onset(steps, dz, thr)
            pl = configured_plateau(plat, steps, lcand, log_k, z_onset)
            h = pl.height / log_k
            out.append(
                {
                    "experiment": r.experiment,
                    "run_id": r.run_id,
                    "k": int(r.k),
                    "d": int(r.d),
                    "seed": int(r.seed),
                    "window_end": label,
                    "delta_z_onset": thr,
                    "primary": thr == primary,
                    "window_start": pl.start,
                    "window_stop": pl.end,
                    "n_evals": pl.n_evals,
                    "height_over_log_k": h,
                    "in_band": bool(lo <= h <= hi),
                    "band_low": lo,
                    "band_high": hi,
                }
            )
    return pd.DataFrame(out, columns=PLATEAU_SENSITIVITY_COLUMNS)

"""Fits over runs (docs/method.md#fits; E3, E4 and the sweeps): config `fits:` entries ->
results/fits.csv.

Each fit pools the runs of its experiments (a run shared by two experiments counts once),
fits y = c x^b with a bootstrap over runs, and treats censored runs as censored (Tobit),
never as a tau and never silently dropped: `n_censored` is in every row. A diverged run is
not censored: config `diverged:` (mbc.analysis.diverged) leaves it out, `n_diverged` counts it.
A run with no value and no bound to censor it at (a sampled window that never closed or
closed without a start, which the author's script leaves out) is left out and counted in
`n_left_out`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mbc.analysis import diverged as div
from mbc.analysis.config_sections import Bootstrap, Fit, FitDifference, ThresholdSensitivity
from mbc.analysis.fits import PowerLawFit, exponent_difference, fit_power_law
from mbc.core.crossing import first_crossing
from mbc.diagnostics.logged import sampled_bound, sampled_series

FIT_COLUMNS = [
    "name", "x_name", "exponent", "ci_low", "ci_high", "prefactor", "r2", "n", "n_censored",
    "method", "ci_level", "n_boot", "n_diverged", "n_left_out",
]  # fmt: skip


# fit y -> (tau.csv column, its censoring column, the column holding a censored run's
# lower bound or None, counted in examples seen). A censored run without a bound is left
# out, and so is a run with no value that is not censored (a window without a start).
WAITING_TIMES = {
    "tau": ("tau", "censored", "steps", False),
    "examples": ("tau", "censored", "steps", True),
    "first_target_tau": ("first_target_tau", "first_target_censored", "steps", False),
    "first_target_examples": ("first_target_tau", "first_target_censored", "steps", True),
    # candidate tau on the author's sampled evaluation (his D-law); bounded only by a budget
    "tau_sampled": ("tau_sampled", "tau_sampled_censored", "tau_sampled_bound", False),
    # his E7 tau: the logged running-mean L1 of the training batches
    "first_target_tau_log": ("first_target_tau_log", "first_target_log_censored", "steps", False),
    "first_target_log_examples": (
        "first_target_tau_log", "first_target_log_censored", "steps", True
    ),
    "transition_duration": (
        "transition_duration", "transition_censored", "transition_bound", False
    ),
    # the window on the author's sampled evaluation: no bound column, so a window that never
    # closed is left out, as his analyze_lr_sweep.py leaves out a run with no transition
    "transition_duration_sampled": (
        "transition_duration_sampled", "transition_sampled_censored", None, False
    ),
    "dip_duration": ("dip_duration", "dip_censored", "dip_bound", False),
}  # fmt: skip


def _fit(
    rows: pd.DataFrame,
    name: str,
    x: str,
    y: str,
    boot: Bootstrap,
    seed_offset: int = 0,
    diverged: set[str] = frozenset(),
) -> tuple[PowerLawFit, int, int]:
    """The fit, how many diverged runs (`diverged`, ids) it left out, and how many runs
    with no value and no bound."""
    rows, n_div = div.drop(rows.drop_duplicates("run_id"), diverged)
    censored = None
    if y not in WAITING_TIMES:  # a column of the Hessian table: measured at every row
        yv = rows[y].to_numpy(float)
    else:
        col, cens_col, bound_col, per_example = WAITING_TIMES[y]
        censored = rows[cens_col].astype(bool).to_numpy()
        # a censored run is known only to exceed its bound (the budget for a waiting time);
        # a run with no value that is not censored has no bound either
        has_bound = bound_col is not None and bound_col in rows
        bound = rows[bound_col] if has_bound else pd.Series(np.nan, index=rows.index)
        value = rows[col].astype("Float64").to_numpy(float, na_value=np.nan)
        t = np.where(censored, bound.astype("Float64").to_numpy(float, na_value=np.nan), value)
        yv = t * rows["batch_size"].to_numpy(float) if per_example else t
    keep = np.isfinite(yv) & (yv > 0)
    fit = fit_power_law(
        rows[x].to_numpy(float)[keep],
        yv[keep],
        censored=None if censored is None else censored[keep],
        units=rows["run_id"].to_numpy()[keep],
        name=name,
        x_name=x,
        n_boot=boot.n_boot,
        ci=boot.ci,
        seed=boot.seed + seed_offset,
    )
    return fit, n_div, int((~keep).sum())


def fit_table(
    fits: Sequence[Fit],
    tau: pd.DataFrame,
    hessian: pd.DataFrame,
    boot: Bootstrap,
    differences: Sequence[FitDifference] = (),
    diverged: str = "exclude",
) -> pd.DataFrame:
    """One row per fit (and per `by` value), then one per `differences` entry: the exponent
    of fit `of[0]` minus that of `of[1]`, its CI from independent bootstraps of the two.
    diverged: config `diverged` (mbc.analysis.diverged)."""
    out, fitted = [], {}  # name -> (fit, its rows, x, y, n_diverged, n_left_out)
    ids = div.check(tau, diverged, "fits")

    def add(rows: pd.DataFrame, name: str, x: str, y: str) -> None:
        fit, nd, n_out = _fit(rows, name, x, y, boot, diverged=ids)
        fitted[name] = (fit, rows, x, y, nd, n_out)
        out.append({**fit.to_row(), "n_diverged": nd, "n_left_out": n_out})

    for spec in fits:
        if spec.table == "hessian":  # one estimator's rows (hessian.csv is long)
            rows = hessian[(hessian["phase"] == "plateau") & (hessian["method"] == spec.method)]
        else:
            rows = tau[tau["experiment"].isin(spec.experiments)]
        if spec.by is not None:
            for value, sub in sorted(rows.groupby(spec.by), key=lambda kv: kv[0]):
                add(sub, f"{spec.name}_at_{spec.by}{value:g}", spec.x, spec.y_column)
        else:
            add(rows, spec.name, spec.x, spec.y_column)
    for diff in differences:
        a, b = diff.of
        if a not in fitted or b not in fitted:
            raise ValueError(f"fit_differences {diff.name!r}: no fit named {a!r} or {b!r}")
        # the second fit re-drawn with the next bootstrap seed: the two are independent
        _, rows, x, y, nd, n_out = fitted[b]
        fb, _, _ = _fit(rows, b, x, y, boot, seed_offset=1, diverged=ids)
        row = exponent_difference(fitted[a][0], fb, diff.name).to_row()
        out.append({**row, "n_diverged": fitted[a][4] + nd, "n_left_out": fitted[a][5] + n_out})
    return pd.DataFrame(out, columns=FIT_COLUMNS)


def retau(tau: pd.DataFrame, metrics: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """tau.csv rows with tau recomputed at another threshold from the per-run metrics (the
    caller passes the grid rows, as `mbc.diagnostics.summary.summarize_run` reads them:
    `mbc.core.spec.grid_rows`)."""
    out = tau.copy()
    taus = {}
    for run_id, m in metrics.groupby("run_id"):
        m = m.sort_values("step")
        k = int(tau.loc[tau.run_id == run_id, "k"].iloc[0])
        taus[run_id] = first_crossing(
            m["step"].to_numpy(), m["candidate_loss"].to_numpy(), threshold * math.log(k)
        )
    out["tau"] = [taus.get(r) for r in out.run_id]
    out["censored"] = out["tau"].isna()
    out["tau"] = out["tau"].astype("Float64")
    out["threshold"] = threshold
    return out


def retau_sampled(
    tau: pd.DataFrame, sampled: dict[str, pd.DataFrame], threshold: float
) -> pd.DataFrame:
    """tau.csv rows with the author's candidate tau (`tau_sampled`) recomputed at another
    threshold from each run's sampled evaluation (`sampled`: run id -> its train_log.csv's
    `step`, `candidate_loss_sampled`), bounded as tau.csv's is: a run that did not cross is
    bounded by its last step only where it ran its budget (`train.max_steps`). A run
    without the series is neither measured nor censored (left out, counted)."""
    out = tau.copy()
    value, censored, bound = [], [], []
    for _, row in tau.iterrows():
        if (series := sampled_series(sampled.get(row.run_id))) is None:
            value.append(None), censored.append(False), bound.append(None)
            continue
        t = first_crossing(*series, threshold * math.log(int(row.k)))
        value.append(t), censored.append(t is None)
        # a tau.csv from before the spec columns: the budget is unknown, nothing bounded
        bound.append(sampled_bound(t is None, int(row.steps), row.get("train.max_steps")))
    out["tau_sampled"] = pd.array(value, dtype="Float64")
    out["tau_sampled_censored"] = censored
    out["tau_sampled_bound"] = pd.array(bound, dtype="Float64")
    out["threshold"] = threshold
    return out


def threshold_table(
    cfg: ThresholdSensitivity,
    tau: pd.DataFrame,
    metrics: pd.DataFrame,
    boot: Bootstrap,
    diverged: str = "exclude",
    sampled: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """E4: the tau-vs-D (or K) exponent at each threshold in [0.3, 0.7] x log K (diverged
    runs as config `diverged` says: left out before tau is recomputed, and counted), on
    our fixed evaluation (`evaluation` fixed: tau from `metrics`) and on the author's
    sampled one (`sampled`: tau_sampled from each run's training log, `retau_sampled`; his
    E4 re-read his E1 runs' candidate tau, the series of his D-law)."""
    rows = tau[tau["experiment"].isin(cfg.experiments)]
    rows, nd = div.drop(rows[rows.model == "transformer"], div.check(tau, diverged, "E4"))
    m = metrics[metrics.run_id.isin(rows.run_id)]
    out = []
    for evaluation in ("fixed", "sampled"):
        for thr in cfg.thresholds:
            if evaluation == "fixed":
                name, y, at = f"tau_vs_{cfg.x}_thr{thr:g}", "tau", retau(rows, m, thr)
            else:
                name, y = f"tau_sampled_vs_{cfg.x}_thr{thr:g}", "tau_sampled"
                at = retau_sampled(rows, sampled or {}, thr)
            fit, _, n_out = _fit(at, name, cfg.x, y, boot)
            out.append(
                {
                    "evaluation": evaluation,
                    "threshold": thr,
                    **fit.to_row(),
                    "n_diverged": nd,
                    "n_left_out": n_out,
                }
            )
    return pd.DataFrame(out, columns=["evaluation", "threshold", *FIT_COLUMNS])

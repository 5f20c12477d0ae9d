"""Appendix figures (the section "Supplementary experiments"): the linear network (E13),
the task direction (E14), label noise (E12), sharing (E11), the threshold (E4) and the
plateau window. Which experiments and fits each draws is its config `figures` entry."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from mbc.core.spec import REVERSE_DIRECTIONS
from mbc.paper.config_sections import FigureEntry
from mbc.paper.figures.common import (
    CENSORED_LABEL,
    FIT_NUMERIC,
    ONE_COL,
    TWO_COL,
    all_finite,
    as_bool,
    experiment_names,
    fit_row,
    flag_col,
    fmt_value,
    metrics_rows,
    numeric_cols,
    one_seed_per,
    tau_rows,
    text_col,
)
from mbc.paper.figures.drawing import (
    add_legend,
    colors_for,
    fit_line,
    hollow_markers,
    no_data,
    note,
    run_curves,
    tau_axes,
    tau_budget_arrays,
    tau_marker_handle,
    tau_points,
    threshold_lines,
)
from mbc.paper.figures.drawn import absent, drew
from mbc.paper.figures.registry import paper_figure


@paper_figure("appendix_linear")
def fig_appendix_linear(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """L_cand / log K of the linear network on B's characters (the `linear` experiments, E13,
    dashed) and on B's identity (`identity`, E13_identity, dash-dotted) vs the matching transformer
    runs (same K, D; one of the `transformer` experiments, E1, first; solid)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 3.3))
    all_tau = tau_rows(tables["tau"])
    m = metrics_rows(tables["metrics"])
    styles = {"linear": "--", "identity": "-."}  # ":" is the log K line

    def runs_of(role: str) -> pd.DataFrame:
        rows = all_tau[all_tau["experiment"].isin(entry.experiments_of(role))]
        if (rows["model"] != "").any():
            rows = rows[rows["model"] == "linear"]
        return one_seed_per(rows[rows["run_id"].isin(set(m["run_id"]))], "k")

    lin = {role: runs_of(role) for role in styles}
    if all(v.empty for v in lin.values()):
        no_data(ax, f"no {experiment_names(entry.experiments_of('linear'))} runs with metrics")
        return fig
    trans = all_tau[(all_tau["model"] == "transformer") & all_tau["run_id"].isin(set(m["run_id"]))]
    # Prefer a `transformer` run with the same K and D, else any transformer run with them.
    preferred = trans["experiment"].isin(entry.experiments_of("transformer"))
    trans = trans.assign(_pref=(~preferred).astype(int))
    every = pd.concat(list(lin.values()))
    kcol = colors_for(every["k"])
    any_cens, matched = False, set()
    for role, rows in lin.items():
        for _, row in rows.iterrows():
            col = kcol.get(float(row["k"]), "0.5")
            run = m[m["run_id"] == row["run_id"]]
            any_cens |= run_curves(ax, None, run, row, color=col, ls=styles[role])
            drew(ax, role)
            same = trans[(trans["k"] == row["k"]) & ((trans["d"] == row["d"]) | trans["d"].isna())]
            same = same.sort_values(["_pref", "seed", "run_id"])
            if same.empty or (row["k"], row["d"]) in matched:
                continue
            t = same.iloc[0]
            matched.add((row["k"], row["d"]))
            any_cens |= run_curves(ax, None, m[m["run_id"] == t["run_id"]], t, color=col)
            drew(ax, "transformer")
    for k, col in kcol.items():
        ax.plot([], [], color=col, label=f"K={fmt_value(k)}")
    if not matched:
        note(ax, "no matching transformer runs", "lower left")
        absent(ax, "transformer", "no transformer run has the same K and D")
    threshold_lines(ax, every["threshold"])
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(r"$L_\mathrm{cand}$ / log K")
    what = {"linear": "B's characters", "identity": "B's identity"}
    extra = [  # a reading's line only where it has runs
        Line2D(
            [],
            [],
            color="0.3",
            ls=styles[role],
            label=f"linear, {what[role]} ({experiment_names(entry.experiments_of(role))})",
        )
        for role in styles
        if not lin[role].empty
    ]
    extra += [Line2D([], [], color="0.3", ls="-", label="transformer"), tau_marker_handle()]
    # under the axes: the curves fill the plot from log K down to 0 at every step
    add_legend(ax, censored=any_cens, extra=extra, below=True, fontsize=6.5, ncol=2)
    return fig


@paper_figure("appendix_direction")
def fig_appendix_direction(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """(B,z)->A against the reverse task per K: (a) our candidate tau of the `runs`
    experiments (E14, constant lr); (b) the author's lag (`lag_step`, the direction row's
    statistic) of the `author` experiments (E14_author, his regime). Bars: the mean over
    uncensored seeds; points: the seeds."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.0))
    runs, author = entry.experiments_of("runs"), entry.experiments_of("author")
    a.set_title(f"(a) candidate tau (ours), {experiment_names(runs)}", loc="left")
    b.set_title(f"(b) lag (author's), {experiment_names(author)}", loc="left")
    cens = _direction_bars(a, tables, runs, "tau", "censored", "tau (steps)", label_bars=True)
    cens |= _direction_bars(
        b, tables, author, "lag_step", "lag_censored", "lag (steps)", label_bars=False
    )
    extra = [
        Line2D([], [], marker="o", ls="none", color="0.15", ms=3, label="seeds"),
        Line2D([], [], ls="none", label="bars: mean over uncensored seeds"),
    ]
    # under the panels: the bars fill the plots from 0 up; one legend for both
    add_legend(a, censored=cens, extra=extra, under_figure=True, ncol=5, fontsize=6.5)
    return fig


def _direction_bars(
    ax: Axes,
    tables: dict[str, pd.DataFrame],
    experiments: list[str],
    y: str,
    censored: str,
    ylabel: str,
    *,
    label_bars: bool,
) -> bool:
    """One panel of the direction figure: `y` per K and task, the seeds as points (a run
    without `y`, or flagged in `censored`, at its budget), bars at the mean of the others.
    Returns whether a censored seed was drawn."""
    rows = tau_rows(tables["tau"], experiments)
    if rows.empty or (censored not in rows and rows[y].isna().all()):  # a table before `y`
        no_data(
            ax, f"no {experiment_names(experiments)} runs" if rows.empty else f"no {y} in tau.csv"
        )
        return False
    flagged = as_bool(rows[censored]) if censored in rows else False
    cen = (flagged | rows[y].isna()) & ~rows["diverged"]
    ks = sorted(v for v in rows["k"].unique() if np.isfinite(v))
    reverse = next((d for d in REVERSE_DIRECTIONS if (rows["task"] == d).any()), "az_to_b")
    rev_label = "(A,z)\u2192B" if reverse == "az_to_b" else "A\u2192B"
    tasks = (("bz_to_a", "(B,z)\u2192A", "C0", -0.2), (reverse, rev_label, "C1", 0.2))
    any_cens = False
    rng = np.random.default_rng(0)  # fixed jitter: reproducible figure bytes
    for task, label, col, off in tasks:
        heights = []
        for i, k in enumerate(ks):
            at = (rows["task"] == task) & (rows["k"] == k)
            gk = rows[at]
            heights.append(gk.loc[~cen[at] & ~gk["diverged"], y].dropna().mean())
            x = np.full(len(gk), i + off) + rng.uniform(-0.05, 0.05, len(gk))
            _, nc = tau_points(
                ax,
                x,
                gk[y],
                gk["steps"],
                cen[at].to_numpy(bool),
                gk["diverged"].to_numpy(bool),
                color="0.15",
                size=9,
                positive=False,
            )
            any_cens |= nc > 0
        ax.bar(
            np.arange(len(ks)) + off,
            heights,
            width=0.38,
            color=col,
            alpha=0.75,
            label=label if label_bars else None,
            zorder=1,
        )
    ax.set_xticks(range(len(ks)), [f"K={fmt_value(k)}" for k in ks])
    ax.set_ylabel(ylabel)
    missing = [lab for t, lab, _, _ in tasks if not (rows["task"] == t).any()]
    if missing:
        note(ax, "missing: " + ", ".join(missing), "upper right")
    return any_cens


@paper_figure("appendix_label_noise")
def fig_appendix_label_noise(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """tau vs label-noise probability of the `runs` experiments (E12), beside their
    first-target taus: the author's (H4's statistic: the logged running-mean L1 on the
    corrupted training labels) and ours (a clean-label evaluation, which memorised wrong
    labels keep high), and the final candidate accuracy."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 2.5))
    a.set_title("(a) waiting time", loc="left")
    b.set_title("(b) final candidate accuracy", loc="left")
    names = experiment_names(entry.experiments_of("runs"))
    e12 = tau_rows(tables["tau"], entry.experiments_of("runs"))
    if e12.empty:
        no_data(a, f"no {names} runs")
        no_data(b, f"no {names} runs")
        return fig
    _, nc = tau_points(
        a,
        *tau_budget_arrays(e12, "label_noise"),
        color="C0",
        label=f"candidate tau ({names})",
        positive=False,
    )
    _, nc_first = tau_points(
        a,
        *tau_budget_arrays(e12, "label_noise", "first_target_tau", "first_target_censored"),
        color="C1",
        marker="s",
        label="clean-label first-target tau (ours)",
        positive=False,
    )
    if "first_target_tau_log" in e12 and e12["first_target_tau_log"].notna().any():
        _, nc_log = tau_points(
            a,
            *tau_budget_arrays(
                e12, "label_noise", "first_target_tau_log", "first_target_log_censored"
            ),
            color="C3",
            marker="D",
            label="logged first-target tau (author's; H4)",
            positive=False,
        )
        nc_first += nc_log
    ps = sorted(v for v in e12["label_noise"].unique() if np.isfinite(v))
    for axis in (a, b):
        axis.set_xticks(ps, [f"{v:g}" for v in ps])
    a.set_xlabel("label noise p")
    a.set_ylabel("tau (steps)")
    add_legend(a, censored=nc + nc_first > 0, loc="center right")  # censored runs sit on top
    ok = all_finite(e12["label_noise"], e12["final_candidate_accuracy"])
    if not ok.any():
        no_data(b, "no final accuracy")
        return fig
    cen = e12["censored"].to_numpy(bool)
    x, y = e12["label_noise"].to_numpy(float), e12["final_candidate_accuracy"].to_numpy(float)
    b.scatter(x[ok & ~cen], y[ok & ~cen], s=16, color="C2", label="crossed threshold", zorder=3)
    if (ok & cen).any():
        hollow_markers(b, x[ok & cen], y[ok & cen], "C2", element="censored", s=20, marker="^",
                label=CENSORED_LABEL)  # fmt: skip
    b.set_xlabel("label noise p")
    b.set_ylabel("final candidate accuracy")
    b.set_ylim(-0.03, 1.03)
    b.legend(loc="lower left")
    return fig


@paper_figure("appendix_sharing")
def fig_appendix_sharing(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Against the sharing factor n_groups / G (log-log), the `runs` experiments (E11):
    (a) the author's duration (first L_cand below log K to the first below 0.5 nats, on his
    sampled evaluation) + 1 per run, the mean over seeds per factor, and the `author`
    statistic (H1's beta) in the legend; (b) our candidate tau with the `line` fit."""
    names = experiment_names(entry.experiments_of("runs"))
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 2.9))
    a.set_title(f"(a) author's duration, {names}", loc="left")
    b.set_title(f"(b) ours: candidate tau, {names}", loc="left")
    e11 = tau_rows(tables["tau"], entry.experiments_of("runs"))
    if e11.empty:
        no_data(a, f"no {names} runs")
        no_data(b, f"no {names} runs")
        return fig
    schemes = list(dict.fromkeys(sorted(e11["sharing"])))
    color = {kind: f"C{i % 8}" for i, kind in enumerate(schemes)}
    _sharing_author(a, e11, color, tables["statistics"], entry.statistic_of("author"))
    any_cens = False
    for kind, g in e11.groupby("sharing", sort=True):
        _, nc = tau_points(
            b, *tau_budget_arrays(g, "sharing_factor"), color=color[kind], label=kind or "runs"
        )
        any_cens |= nc > 0
    fit_line(b, fit_row(tables["fits"], entry.fit_of("line")), e11["sharing_factor"])
    tau_axes(b, "sharing factor (groups per selector set)")
    add_legend(b, censored=any_cens, below=True)
    return fig


def _sharing_author(
    ax: Axes, e11: pd.DataFrame, color: dict, statistics: pd.DataFrame, name: str
) -> None:
    """Panel (a): his duration + 1 per run (censored: hollow, at its bound + 1), the mean
    over seeds per factor as H1's beta reads it (a censored run at its bound; diverged runs
    left out), and `name`'s value and CI."""
    if "dip_duration_sampled" not in e11 or not e11["dip_duration_sampled"].notna().any():
        no_data(ax, "no sampled evaluation")
        return
    x = e11["sharing_factor"].to_numpy(float)
    y = e11["dip_duration_sampled"].to_numpy(float) + 1
    bound = (
        e11["dip_bound_sampled"].to_numpy(float) + 1
        if "dip_bound_sampled" in e11
        else np.full(len(e11), np.nan)
    )
    cen, dv = flag_col(e11, "dip_censored_sampled"), e11["diverged"].to_numpy(bool)
    any_cens = False
    for kind in color:
        m = (e11["sharing"] == kind).to_numpy() & ~dv
        _, nc = tau_points(
            ax, x[m], y[m], bound[m], cen[m], color=color[kind], label=kind or "runs"
        )
        any_cens |= nc > 0
    read = np.where(cen, bound, y)  # what the statistic averages (loglog_slope's y_bound)
    ok = all_finite(x, read) & ~dv
    means = pd.Series(read[ok]).groupby(x[ok]).mean()
    ax.scatter(means.index, means.to_numpy(), marker="_", s=160, color="0.15", zorder=4,
               label="mean over seeds")  # fmt: skip
    found = "name" in statistics and name in set(statistics["name"])
    row = statistics.set_index("name").loc[name] if found else None
    if row is not None and np.isfinite(row["value"]):
        ci = (
            f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
            if np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"])
            else ""
        )
        value = round(float(row["value"]), 2) + 0.0  # no "-0.00"
        ax.plot([], [], ls="none", label=f"beta (H1) = {value:.2f}{ci}")
        drew(ax, "beta")
    else:
        absent(ax, "beta", "too few runs with a duration at more than one sharing factor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sharing factor (groups per selector set)")
    ax.set_ylabel("duration + 1 (steps)")
    add_legend(ax, censored=any_cens, below=True)


@paper_figure("appendix_threshold")
def fig_appendix_threshold(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """E4: exponent of tau vs D (with CI) as a function of the threshold (fraction of log K),
    on our fixed evaluation and on the author's sampled one (`evaluation`; a table from
    before that column is ours alone), side by side at each threshold."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 2.6))
    t = numeric_cols(tables["threshold_sensitivity"], ("threshold", *FIT_NUMERIC))
    t = t[np.isfinite(t["threshold"])].sort_values("threshold")
    if "evaluation" not in t:
        t = t.assign(evaluation="fixed")
    if t.empty:
        no_data(ax, "empty threshold_sensitivity")
        return fig
    series = [
        ("fixed", "C0", "o", "ours: fixed contexts"),
        ("sampled", "C1", "s", "the author's: groups drawn afresh"),
    ]
    fits = {
        ev: np.isfinite(t[t["evaluation"] == ev]["exponent"].to_numpy(float)) for ev, *_ in series
    }
    drawn = [(ev, c, m, lab) for ev, c, m, lab in series if fits[ev].any()]
    # a series in the table with no fit at all (logs without the sampled evaluation): said
    unmeasured = [
        Line2D([], [], ls="none", label=f"{lab}: not measured")
        for ev, _, _, lab in series
        if (t["evaluation"] == ev).any() and not fits[ev].any()
    ]
    if unmeasured:
        drew(ax, "series_unmeasured")
    if not drawn:
        no_data(ax, "no fit succeeded")
        return fig
    width = 0.012 if len(drawn) > 1 else 0.0  # side by side at each threshold
    thresholds = np.unique(t["threshold"].to_numpy(float))
    fitted_at = np.unique(
        t["threshold"].to_numpy(float)[np.isfinite(t["exponent"].to_numpy(float))]
    )
    for i, (ev, color, marker, label) in enumerate(drawn):
        s = t[t["evaluation"] == ev]
        x = s["threshold"].to_numpy(float) + (i - (len(drawn) - 1) / 2) * width
        e = s["exponent"].to_numpy(float)
        lo, hi = s["ci_low"].to_numpy(float), s["ci_high"].to_numpy(float)
        ok = np.isfinite(e)
        ci = ok & all_finite(lo, hi)
        if ci.any():
            ax.errorbar(
                x[ci],
                e[ci],
                yerr=[np.maximum(e[ci] - lo[ci], 0), np.maximum(hi[ci] - e[ci], 0)],
                fmt=marker,
                color=color,
                ms=4,
                label=f"{label}, CI",
            )
        if (ok & ~ci).any():
            ax.plot(x[ok & ~ci], e[ok & ~ci], marker, mfc="none", color=color, label=label)
        for xi, thr in zip(x[~ok], s["threshold"].to_numpy(float)[~ok], strict=True):
            if thr in fitted_at:  # another series fitted here, this one did not: marked
                drew(ax, "series_na")
                ax.annotate(
                    "n/a",
                    (xi, 0.02),
                    xycoords=("data", "axes fraction"),
                    ha="center",
                    fontsize=6.5,
                    color=color,
                )
        ax.plot(x[ok], e[ok], "-", color=color, lw=0.6, alpha=0.6)
        top = np.where(ci, hi, e)
        for xi, yi, nc in zip(x[ok], top[ok], s["n_censored"].to_numpy(float)[ok], strict=True):
            if np.isfinite(nc) and nc > 0:
                drew(ax, "threshold_censored")
                ax.annotate(
                    f"{int(nc)} cens.",
                    (xi, yi),
                    textcoords="offset points",
                    xytext=(0, 3),
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                    color=color,
                )
    for xi in np.setdiff1d(thresholds, fitted_at):  # a threshold no fit succeeded at: shown
        ax.axvline(xi, color="0.8", lw=0.6)
        drew(ax, "no_fit_at_threshold")
        ax.annotate(
            "fit n/a",
            (xi, np.nanmean(t["exponent"].to_numpy(float))),
            ha="center",
            va="center",
            rotation=90,
            fontsize=6.5,
            color="0.35",
            backgroundcolor="white",
        )
    ax.margins(x=0.1, y=0.15)
    ax.set_xlabel("threshold (fraction of log K)")
    ax.set_ylabel("exponent of tau vs D")
    ax.set_xticks(thresholds, [f"{v:g}" for v in thresholds])
    add_legend(ax, below=True, extra=unmeasured)
    return fig


@paper_figure("appendix_plateau")
def fig_appendix_plateau(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Plateau height / log K of each E1/E2 run under each window end, with the band."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 3.1))
    t = numeric_cols(
        tables["plateau_sensitivity"], ("k", "height_over_log_k", "band_low", "band_high")
    )
    if t.empty:
        no_data(ax, "empty plateau_sensitivity")
        return fig
    t["primary"] = as_bool(t["primary"]) if "primary" in t else False
    ends = list(dict.fromkeys(text_col(t, "window_end")))  # table order: thresholds, loss onset
    lo, hi = t["band_low"].iloc[0], t["band_high"].iloc[0]
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axhspan(lo, hi, color="0.92", zorder=0, label=f"band {lo:g}-{hi:g}")
    ax.axhline(1.0, color="0.5", lw=0.6, ls="--", zorder=1)
    colors = colors_for(sorted(t["k"].dropna().unique()))
    rng = np.random.default_rng(0)  # fixed jitter: the figure is reproducible
    for i, end in enumerate(ends):
        g = t[text_col(t, "window_end") == end]
        for k, gk in g.groupby("k"):
            y = gk["height_over_log_k"].to_numpy(float)
            x = i + rng.uniform(-0.18, 0.18, y.size)
            ax.scatter(x, y, s=9, color=colors[k], label=f"K={k:g}" if i == 0 else None, zorder=3)
        y = g["height_over_log_k"].to_numpy(float)
        ok = np.isfinite(y)
        n_in = int(((y >= lo) & (y <= hi))[ok].sum())
        ax.annotate(
            f"{n_in}/{ok.sum()}",
            (i, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=6.5,
            color="0.35",
        )
    primary = set(text_col(t[t["primary"]], "window_end"))
    labels = [f"{e}\n(used)" if e in primary else e for e in ends]
    ax.set_xticks(
        range(len(ends)), [lab.replace("delta_z > ", "dz>") for lab in labels], fontsize=6.5
    )
    ax.set_xlim(-0.6, len(ends) - 0.4)
    ax.set_xlabel("plateau window ends at (dz: z-shuffle gap)")
    ax.set_ylabel("plateau height / log K")
    note(ax, "above: runs in band / runs", loc="lower left")
    add_legend(ax, below=True, fontsize=6.5, ncol=4)  # under the axes: clear of the points
    return fig

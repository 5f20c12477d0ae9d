"""Main-text figures of the plateau and the waiting time: loss curves (E1), tau vs D (E1,
E2), noise (E6, E7) and the initialisation scale (E15, the section "Robustness to
initialisation scale"). The main text's diagnostic figures (E8-E10) are in `diagnostics`.
Which experiments and fits each draws is its config `figures` entry (the paper's above)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mbc.core.report_sections import FigureEntry
from mbc.paper.figures.common import (
    CENSORED_LABEL,
    DIVERGED_LABEL,
    ONE_COL,
    TWO_COL,
    _finite,
    _fit_row,
    _fmt,
    _metrics_rows,
    _names,
    _one_seed_per,
    _tau_rows,
)
from mbc.paper.figures.drawing import (
    _censored_handle,
    _colors,
    _fit_line,
    _legend,
    _no_data,
    _note,
    _run_curves,
    _tau_axes,
    _tau_budget_arrays,
    _tau_marker_handle,
    _tau_points,
    _threshold_lines,
)
from mbc.paper.figures.registry import _register


@_register("loss_curves", ["metrics", "tau"])
def fig_loss_curves(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """L_cand / log K and delta_z vs step of the `runs` experiments (E1), one seed per K
    (colour), tau marked."""
    fig, (ax, axd) = plt.subplots(1, 2, figsize=(TWO_COL, 2.6))
    ax.set_title("(a) candidate loss", loc="left")
    axd.set_title(r"(b) z-shuffle gap $\Delta_z$", loc="left")
    names = _names(entry.experiments_of("runs"))
    tau = _tau_rows(tables["tau"], entry.experiments_of("runs"))
    m = _metrics_rows(tables["metrics"])
    runs = _one_seed_per(tau[tau["run_id"].isin(set(m["run_id"]))], "k")
    if runs.empty:
        what = f"no {names} runs in tau" if tau.empty else f"no metrics for {names} runs"
        _no_data(ax, what)
        _no_data(axd, what)
        return fig
    colors = _colors(runs["k"])
    any_cens = False
    for _, row in runs.iterrows():
        c = colors.get(float(row["k"]), "0.5")
        lab = f"K={_fmt(row['k'])}"
        any_cens |= _run_curves(ax, axd, m[m["run_id"] == row["run_id"]], row, color=c, label=lab)
    _threshold_lines(ax, runs["threshold"])
    for a in (ax, axd):
        a.set_xscale("log")
        a.set_xlabel("step")
    ax.set_ylabel(r"$L_\mathrm{cand}$ / log K")
    axd.set_ylabel(r"$\Delta_z$ (nats)")
    axd.axhline(0.0, color="0.6", lw=0.6)
    # Panel (a): reference lines and markers; panel (b): the K colours.
    handles = [h for h in ax.get_lines() if h.get_label().startswith(("log K", "threshold"))]
    diverged = [h for h in ax.get_lines() if h.get_label() == DIVERGED_LABEL][:1]
    ax.legend(
        [*handles, _tau_marker_handle(), *([_censored_handle()] if any_cens else []), *diverged],
        [h.get_label() for h in handles]
        + ["tau"]
        + ([CENSORED_LABEL] if any_cens else [])
        + [DIVERGED_LABEL] * len(diverged),
        loc="lower left",
    )
    axd.legend(ncol=2 if len(runs) > 5 else 1, loc="upper left", title=f"{names}, one seed per K")
    return fig


@_register("tau_vs_d", ["tau", "fits"])
def fig_tau_vs_d(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """tau vs D of the `n_groups_fixed` (E1) and `d_fixed` (E2) experiments, with the `line`
    fit (tau_vs_d); inset: tau vs K at each fixed D, with the `inset` fit (tau_vs_k, by d)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 4.4))
    n_fixed, d_fixed = entry.experiments_of("n_groups_fixed"), entry.experiments_of("d_fixed")
    tau = _tau_rows(tables["tau"], n_fixed + d_fixed)
    e1, e2 = tau[tau["experiment"].isin(n_fixed)], tau[tau["experiment"].isin(d_fixed)]
    if tau.empty:
        _no_data(ax, f"no {_names(n_fixed + d_fixed)} runs")
        return fig
    any_cens = False
    for df, marker, color, label in (
        (e1, "o", "C0", f"{_names(n_fixed)} (n_groups fixed, D ∝ K)"),
        (e2, "s", "C1", f"{_names(d_fixed)} (fixed D)"),
    ):
        if df.empty:
            continue
        _, nc = _tau_points(
            ax, *_tau_budget_arrays(df, "d"), color=color, marker=marker, label=label
        )
        any_cens |= nc > 0
    _fit_line(ax, _fit_row(tables["fits"], entry.fit_of("line")), tau["d"])
    _tau_axes(ax, "dataset size D (examples)")
    missing = [_names(e) for e, df in ((n_fixed, e1), (d_fixed, e2)) if df.empty]
    if missing:
        _note(ax, "missing: " + ", ".join(missing))

    # Inset: tau vs K at each fixed D (E2's); its entries join the main legend ("inset").
    ins = ax.inset_axes([0.12, 0.62, 0.34, 0.34])
    ins.tick_params(labelsize=6.5, length=2, pad=1)
    if e2.empty:
        _no_data(ins, f"no {_names(d_fixed)}")
    else:
        dcol = _colors(e2["d"], "cividis")
        for d, g in e2.groupby("d"):
            c = dcol.get(float(d), "0.5")
            _, nc = _tau_points(ins, *_tau_budget_arrays(g, "k"), color=c, marker="s", size=8)
            any_cens |= nc > 0
            # Direct label at the right-most point of the series (no legend inside the inset).
            xs = np.where(g["censored"], g["steps"], g["tau"]).astype(float)
            ok = _finite(g["k"], xs) & (xs > 0)
            if ok.any():
                i = int(np.argmax(np.where(ok, g["k"], -np.inf)))
                ins.annotate(
                    f"D={_fmt(d)}",
                    (g["k"].iloc[i], xs[i]),
                    xytext=(3, 0),
                    textcoords="offset points",
                    fontsize=6.5,
                    color=c,
                    va="center",
                )
            row = _fit_row(tables["fits"], f"{entry.fit_of('inset')}_at_d{_fmt(d)}")
            if row is not None:
                _fit_line(ins, row, g["k"], color=c, prefix=f"inset, D={_fmt(d)}")
        ins.set_xscale("log")
        ins.set_yscale("log")
        ins.set_xlabel("K", fontsize=6.5, labelpad=0)
        ins.set_ylabel("tau", fontsize=6.5, labelpad=0)
    _legend(ax, censored=any_cens, also=[ins], below=True)
    return fig


@_register("noise", ["tau", "fits"])
def fig_noise(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Noise sweeps: tau vs lr (the `lr` experiments, E6); tau vs batch size (`batch_size`,
    E7) in steps and in examples seen. Fits: `lr`, and `batch_steps`, `batch_examples` (by k)."""
    lr, batch = _names(entry.experiments_of("lr")), _names(entry.experiments_of("batch_size"))
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(TWO_COL, 3.4))
    a.set_title(f"(a) learning rate, {lr}", loc="left")
    b.set_title(f"(b) batch size (steps), {batch}", loc="left")
    c.set_title(f"(c) batch size (examples), {batch}", loc="left")
    fits = tables["fits"]

    e6 = _tau_rows(tables["tau"], entry.experiments_of("lr"))
    if e6.empty:
        _no_data(a, f"no {lr} runs")
    else:
        _, nc = _tau_points(a, *_tau_budget_arrays(e6, "lr"), color="C0", label=f"{lr} runs")
        _fit_line(a, _fit_row(fits, entry.fit_of("lr")), e6.loc[~e6["diverged"], "lr"])
        _tau_axes(a, "learning rate")
        _legend(a, censored=nc > 0, below=True)

    e7 = _tau_rows(tables["tau"], entry.experiments_of("batch_size"))
    if e7.empty:
        _no_data(b, f"no {batch} runs")
        _no_data(c, f"no {batch} runs")
        return fig
    kcol = _colors(e7["k"])
    cens = {"b": False, "c": False}
    for k, g in e7.groupby("k"):
        col = kcol.get(float(k), "0.5")
        x, t, budget, cen, dv = _tau_budget_arrays(g, "batch_size")
        _, nc = _tau_points(b, x, t, budget, cen, dv, color=col, label=f"K={_fmt(k)}")
        cens["b"] |= nc > 0
        # Display only: examples seen = steps x batch size (tau and budget alike).
        _, nc = _tau_points(c, x, t * x, budget * x, cen, dv, color=col, label=f"K={_fmt(k)}")
        cens["c"] |= nc > 0
        for ax, kind in ((b, "steps"), (c, "examples")):
            row = _fit_row(fits, f"{entry.fit_of('batch_' + kind)}_at_k{_fmt(k)}")
            _fit_line(ax, row, g["batch_size"], color=col, prefix=f"K={_fmt(k)} fit")
    for ax, key, ylabel in ((b, "b", "tau (steps)"), (c, "c", "tau x batch size (examples)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        _legend(ax, censored=cens[key], below=True)
    return fig


@_register("init_scale", ["tau", "fits"])
def fig_init_scale(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """(a) tau vs init std of the `sweep` experiments (E15) with the `sweep` fit; (b) tau vs
    D under the default init (`default_init`: E1 + E2) and the alternative (`alternative_init`:
    E15_E1 + E15_E2), each with its role's fit."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.0))
    fits = tables["fits"]
    names = _names(entry.experiments_of("sweep"))
    sweep = _tau_rows(tables["tau"], entry.experiments_of("sweep"))
    any_cens = False
    placed = 0  # runs a log-log panel can place (a tau, or a budget > 0 if censored)
    if sweep.empty:
        _no_data(a, f"no {names} runs")
    else:
        no, nc = _tau_points(
            a, *_tau_budget_arrays(sweep, "init_std"), color="C2", label=f"{names} runs"
        )
        any_cens |= nc > 0
        if no + nc == 0:
            _no_data(a, f"no {names} run with a tau or a budget > 0")
        else:
            _fit_line(a, _fit_row(fits, entry.fit_of("sweep")), sweep["init_std"])
            _tau_panel(a, "init std (every weight matrix)", "(a) tau vs init scale", any_cens)
    drawn = False
    for role, color, marker, label in (
        ("default_init", "C0", "o", "default init"),
        ("alternative_init", "C3", "s", "alternative init"),
    ):
        df = _tau_rows(tables["tau"], entry.experiments_of(role)).drop_duplicates("run_id")
        if df.empty:
            continue
        scheme = ", ".join(sorted(set(df["init"].astype(str))))
        no, nc = _tau_points(
            b, *_tau_budget_arrays(df, "d"), color=color, marker=marker, label=f"{label} ({scheme})"
        )
        any_cens |= nc > 0
        placed += no + nc
        _fit_line(b, _fit_row(fits, entry.fit_of(role)), df["d"], color=color, prefix=label)
        drawn = True
    if not drawn or not placed:
        both = " or ".join(
            _names(entry.experiments_of(r)) for r in ("default_init", "alternative_init")
        )
        _no_data(b, f"no {both} run with a tau or a budget > 0")
    else:
        _tau_panel(b, "dataset size D (examples)", "(b) tau vs D under both inits", any_cens)
    return fig


def _tau_panel(ax: Axes, xlabel: str, title: str, censored: bool) -> None:
    """Log-log axes of tau (steps) against `xlabel`, titled, legend below."""
    _tau_axes(ax, xlabel)
    ax.set_title(title, fontsize=8)
    _legend(ax, censored=censored, below=True)

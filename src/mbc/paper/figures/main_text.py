"""Main-text figures of the plateau and the waiting time: loss curves (E1), tau vs D (E1,
E2), noise (E6, E7) and the initialisation scale (E15, the section "Robustness to
initialisation scale"). The main text's diagnostic figures (E8-E10) are in `diagnostics`."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mbc.paper.figures.common import (  # isort: skip
    CENSORED_LABEL, DIVERGED_LABEL, ONE_COL, TWO_COL, _censored_handle, _colors, _finite, _fit_line, _fit_row, _fmt,
    _legend, _metrics_rows, _no_data, _note, _one_seed_per, _register, _run_curves, _tau_axes,
    _tau_budget_arrays, _tau_marker_handle, _tau_points, _tau_rows, _threshold_lines,
)  # fmt: skip


@_register("loss_curves", ["metrics", "tau"])
def fig_loss_curves(tables: dict[str, pd.DataFrame]) -> Figure:
    """E1: L_cand / log K and delta_z vs step, one seed per K (colour), tau marked."""
    fig, (ax, axd) = plt.subplots(1, 2, figsize=(TWO_COL, 2.6))
    ax.set_title("(a) candidate loss", loc="left")
    axd.set_title(r"(b) z-shuffle gap $\Delta_z$", loc="left")
    tau = _tau_rows(tables["tau"], ["E1"])
    m = _metrics_rows(tables["metrics"])
    runs = _one_seed_per(tau[tau["run_id"].isin(set(m["run_id"]))], "k")
    if runs.empty:
        what = "no E1 runs in tau" if tau.empty else "no metrics for E1 runs"
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
    axd.legend(ncol=2 if len(runs) > 5 else 1, loc="upper left", title="E1, one seed per K")
    return fig


@_register("tau_vs_d", ["tau", "fits"])
def fig_tau_vs_d(tables: dict[str, pd.DataFrame]) -> Figure:
    """tau vs D (E1 and E2), fitted line from `fits` (tau_vs_d); inset tau vs K at fixed D."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 4.4))
    tau = _tau_rows(tables["tau"], ["E1", "E2"])
    e1, e2 = tau[tau["experiment"] == "E1"], tau[tau["experiment"] == "E2"]
    if tau.empty:
        _no_data(ax, "no E1/E2 runs")
        return fig
    any_cens = False
    for df, marker, color, label in (
        (e1, "o", "C0", "E1 (n_groups fixed, D ∝ K)"),
        (e2, "s", "C1", "E2 (fixed D)"),
    ):
        if df.empty:
            continue
        _, nc = _tau_points(
            ax, *_tau_budget_arrays(df, "d"), color=color, marker=marker, label=label
        )
        any_cens |= nc > 0
    _fit_line(ax, _fit_row(tables["fits"], "tau_vs_d"), tau["d"])
    _tau_axes(ax, "dataset size D (examples)")
    missing = [e for e, df in (("E1", e1), ("E2", e2)) if df.empty]
    if missing:
        _note(ax, "missing: " + ", ".join(missing))

    # Inset: tau vs K at each fixed D (E2); its entries join the main legend (marked "inset").
    ins = ax.inset_axes([0.12, 0.62, 0.34, 0.34])
    ins.tick_params(labelsize=6.5, length=2, pad=1)
    if e2.empty:
        _no_data(ins, "no E2")
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
                    f"D={_fmt(d)}", (g["k"].iloc[i], xs[i]), xytext=(3, 0),
                    textcoords="offset points", fontsize=6.5, color=c, va="center",
                )  # fmt: skip
            row = _fit_row(tables["fits"], f"tau_vs_k_at_d{_fmt(d)}")
            if row is not None:
                _fit_line(ins, row, g["k"], color=c, prefix=f"inset, D={_fmt(d)}")
        ins.set_xscale("log")
        ins.set_yscale("log")
        ins.set_xlabel("K", fontsize=6.5, labelpad=0)
        ins.set_ylabel("tau", fontsize=6.5, labelpad=0)
    _legend(ax, censored=any_cens, also=[ins], below=True)
    return fig


@_register("noise", ["tau", "fits"])
def fig_noise(tables: dict[str, pd.DataFrame]) -> Figure:
    """Noise sweeps: tau vs lr (E6); tau vs batch size (E7) in steps and in examples seen."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(TWO_COL, 3.4))
    a.set_title("(a) learning rate, E6", loc="left")
    b.set_title("(b) batch size (steps), E7", loc="left")
    c.set_title("(c) batch size (examples), E7", loc="left")
    fits = tables["fits"]

    e6 = _tau_rows(tables["tau"], ["E6"])
    if e6.empty:
        _no_data(a, "no E6 runs")
    else:
        _, nc = _tau_points(a, *_tau_budget_arrays(e6, "lr"), color="C0", label="E6 runs")
        _fit_line(a, _fit_row(fits, "tau_vs_lr"), e6.loc[~e6["diverged"], "lr"])
        _tau_axes(a, "learning rate")
        _legend(a, censored=nc > 0, below=True)

    e7 = _tau_rows(tables["tau"], ["E7"])
    if e7.empty:
        _no_data(b, "no E7 runs")
        _no_data(c, "no E7 runs")
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
            row = _fit_row(fits, f"tau_vs_batch_{kind}_at_k{_fmt(k)}")
            _fit_line(ax, row, g["batch_size"], color=col, prefix=f"K={_fmt(k)} fit")
    for ax, key, ylabel in ((b, "b", "tau (steps)"), (c, "c", "tau x batch size (examples)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        _legend(ax, censored=cens[key], below=True)
    return fig


@_register("init_scale", ["tau", "fits"])
def fig_init_scale(tables: dict[str, pd.DataFrame]) -> Figure:
    """E15: (a) tau vs init std with the fit tau_vs_init_std; (b) tau vs D under the
    default init (E1 + E2) and the alternative (E15_E1 + E15_E2), each with its fit."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.0))
    fits = tables["fits"]
    sweep = _tau_rows(tables["tau"], ["E15"])
    any_cens = False
    placed = 0  # runs a log-log panel can place (a tau, or a budget > 0 if censored)
    if sweep.empty:
        _no_data(a, "no E15 runs")
    else:
        no, nc = _tau_points(
            a, *_tau_budget_arrays(sweep, "init_std"), color="C2", label="E15 runs"
        )
        any_cens |= nc > 0
        if no + nc == 0:
            _no_data(a, "no E15 run with a tau or a budget > 0")
        else:
            _fit_line(a, _fit_row(fits, "tau_vs_init_std"), sweep["init_std"])
            _tau_panel(a, "init std (every weight matrix)", "(a) tau vs init scale", any_cens)
    drawn = False
    for exps, fit, color, marker, label in (
        (["E1", "E2"], "tau_vs_d", "C0", "o", "default init"),
        (["E15_E1", "E15_E2"], "tau_vs_d_alt_init", "C3", "s", "alternative init"),
    ):
        df = _tau_rows(tables["tau"], exps).drop_duplicates("run_id")
        if df.empty:
            continue
        scheme = ", ".join(sorted(set(df["init"].astype(str))))
        no, nc = _tau_points(
            b, *_tau_budget_arrays(df, "d"), color=color, marker=marker, label=f"{label} ({scheme})"
        )
        any_cens |= nc > 0
        placed += no + nc
        _fit_line(b, _fit_row(fits, fit), df["d"], color=color, prefix=label)
        drawn = True
    if not drawn or not placed:
        _no_data(b, "no E1/E2 or E15_E1/E15_E2 run with a tau or a budget > 0")
    else:
        _tau_panel(b, "dataset size D (examples)", "(b) tau vs D under both inits", any_cens)
    return fig


def _tau_panel(ax: Axes, xlabel: str, title: str, censored: bool) -> None:
    """Log-log axes of tau (steps) against `xlabel`, titled, legend below."""
    _tau_axes(ax, xlabel)
    ax.set_title(title, fontsize=8)
    _legend(ax, censored=censored, below=True)

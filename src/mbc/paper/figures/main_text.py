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

from mbc.paper.config_sections import FigureEntry
from mbc.paper.figures.common import (
    CENSORED_LABEL,
    DIVERGED_LABEL,
    ONE_COL,
    TWO_COL,
    all_finite,
    as_bool,
    experiment_names,
    fit_row,
    flag_col,
    fmt_value,
    metrics_rows,
    one_seed_per,
    tau_rows,
)
from mbc.paper.figures.drawing import (
    add_legend,
    censored_handle,
    colors_for,
    fit_line,
    free_corner,
    no_data,
    note,
    run_curves,
    tau_axes,
    tau_budget_arrays,
    tau_marker_handle,
    tau_points,
    threshold_lines,
)
from mbc.paper.figures.drawn import drew
from mbc.paper.figures.registry import paper_figure


@paper_figure("loss_curves")
def fig_loss_curves(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """L_cand / log K and delta_z vs step of the `runs` experiments (E1), one seed per K
    (colour), tau marked."""
    fig, (ax, axd) = plt.subplots(1, 2, figsize=(TWO_COL, 2.6))
    ax.set_title("(a) candidate loss", loc="left")
    axd.set_title(r"(b) z-shuffle gap $\Delta_z$", loc="left")
    names = experiment_names(entry.experiments_of("runs"))
    tau = tau_rows(tables["tau"], entry.experiments_of("runs"))
    m = metrics_rows(tables["metrics"])
    runs = one_seed_per(tau[tau["run_id"].isin(set(m["run_id"]))], "k")
    if runs.empty:
        what = f"no {names} runs in tau" if tau.empty else f"no metrics for {names} runs"
        no_data(ax, what)
        no_data(axd, what)
        return fig
    colors = colors_for(runs["k"])
    any_cens = False
    for _, row in runs.iterrows():
        c = colors.get(float(row["k"]), "0.5")
        lab = f"K={fmt_value(row['k'])}"
        any_cens |= run_curves(ax, axd, m[m["run_id"] == row["run_id"]], row, color=c, label=lab)
    threshold_lines(ax, runs["threshold"])
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
        [*handles, tau_marker_handle(), *([censored_handle()] if any_cens else []), *diverged],
        [h.get_label() for h in handles]
        + ["tau"]
        + ([CENSORED_LABEL] if any_cens else [])
        + [DIVERGED_LABEL] * len(diverged),
        loc="lower left",
    )
    axd.legend(ncol=2 if len(runs) > 5 else 1, loc="upper left", title=f"{names}, one seed per K")
    return fig


@paper_figure("tau_vs_d")
def fig_tau_vs_d(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """tau vs D of the `n_groups_fixed` (E1) and `d_fixed` (E2) experiments, with the `line`
    fit (tau_vs_d); the author's tau on his sampled evaluation (`tau_sampled`, where logged)
    as plus signs with the `author_line` fit (tau_sampled_vs_d, the scorecard's);
    inset: our tau vs K at each fixed D, with the `inset` fit (tau_vs_k, by d)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 4.4))
    n_fixed, d_fixed = entry.experiments_of("n_groups_fixed"), entry.experiments_of("d_fixed")
    tau = tau_rows(tables["tau"], n_fixed + d_fixed)
    e1, e2 = tau[tau["experiment"].isin(n_fixed)], tau[tau["experiment"].isin(d_fixed)]
    if tau.empty:
        no_data(ax, f"no {experiment_names(n_fixed + d_fixed)} runs")
        return fig
    any_cens = False
    for df, marker, color, label in (
        (e1, "o", "C0", f"groups fixed, D ∝ K ({experiment_names(n_fixed)})"),
        (e2, "s", "C1", f"D fixed ({experiment_names(d_fixed)})"),
    ):
        if df.empty:
            continue
        _, nc = tau_points(ax, *tau_budget_arrays(df, "d"), color=color, marker=marker, label=label)
        any_cens |= nc > 0
    fit_line(ax, fit_row(tables["fits"], entry.fit_of("line")), tau["d"])
    if "tau_sampled" in tau and tau["tau_sampled"].notna().any():
        d, t = tau["d"].to_numpy(float), tau["tau_sampled"].to_numpy(float)
        ok = all_finite(d, t) & (t > 0) & ~tau["diverged"].to_numpy(bool)
        ax.scatter(d[ok], t[ok], marker="+", s=22, lw=0.8, color="C4", zorder=4,
                   label="author's tau (his sampled evaluation)")  # fmt: skip
        drew(ax, "author")
        author = fit_row(tables["fits"], entry.fit_of("author_line"))
        fit_line(ax, author, tau["d"], color="C4", prefix="author's fit", element="author_fit")
    tau_axes(ax, "dataset size D (examples)")
    missing = [experiment_names(e) for e, df in ((n_fixed, e1), (d_fixed, e2)) if df.empty]
    if missing:
        note(ax, "missing: " + ", ".join(missing))

    # Inset: tau vs K at each fixed D (E2's); its entries join the main legend ("inset").
    # In the corner where it covers no point of the main panel (the fewest, if none is free)
    ins = ax.inset_axes(free_corner(ax, (0.34, 0.34)))
    ins.tick_params(labelsize=6.5, length=2, pad=1)
    if e2.empty:
        no_data(ins, f"no {experiment_names(d_fixed)}")
    else:
        dcol = colors_for(e2["d"], "cividis")
        drew(ins, "inset")
        for d, g in e2.groupby("d"):
            c = dcol.get(float(d), "0.5")
            _, nc = tau_points(ins, *tau_budget_arrays(g, "k"), color=c, marker="s", size=8)
            any_cens |= nc > 0
            # Direct label at the right-most point of the series (no legend inside the inset).
            xs = np.where(g["censored"], g["steps"], g["tau"]).astype(float)
            ok = all_finite(g["k"], xs) & (xs > 0)
            if ok.any():
                i = int(np.argmax(np.where(ok, g["k"], -np.inf)))
                ins.annotate(
                    f"D={fmt_value(d)}",
                    (g["k"].iloc[i], xs[i]),
                    xytext=(3, 0),
                    textcoords="offset points",
                    fontsize=6.5,
                    color=c,
                    va="center",
                )
            row = fit_row(tables["fits"], f"{entry.fit_of('inset')}_at_d{fmt_value(d)}")
            fit_line(ins, row, g["k"], color=c, prefix=f"inset, D={fmt_value(d)}",
                      element="inset_fit")  # fmt: skip
        ins.set_xscale("log")
        ins.set_yscale("log")
        ins.set_xlabel("K", fontsize=6.5, labelpad=0)
        ins.set_ylabel("tau", fontsize=6.5, labelpad=0)
    add_legend(ax, censored=any_cens, also=[ins], below=True)
    return fig


@paper_figure("noise")
def fig_noise(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Noise sweeps in two rows. Top, the author's statistics, which the lr and batch rows
    and H2 read: (a) the transition window on his sampled evaluation against lr (the `lr`
    experiments, E6; fit `author_lr`), (b, c) his first-target tau (the logged running-mean
    L1 of the training batches) against batch size (`batch_size`, E7) in steps and in
    examples seen (fits `author_batch_*`, by k). Bottom,
    ours: (d-f) the candidate tau against the same (fits `lr`, `batch_steps`,
    `batch_examples`). A window that never closed, or closed without a start, has no
    duration: it is left out (his script drops it) and counted in the panel."""
    lr, batch = (
        experiment_names(entry.experiments_of("lr")),
        experiment_names(entry.experiments_of("batch_size")),
    )
    fig, axes = plt.subplots(2, 3, figsize=(TWO_COL, 6.6))
    fits = tables["fits"]
    e6 = tau_rows(tables["tau"], entry.experiments_of("lr"))
    e7 = tau_rows(tables["tau"], entry.experiments_of("batch_size"))
    rows = (
        ("author's", "author_", ("window", "transition_duration_sampled"), "logged 1st-target tau"),
        ("ours", "", ("candidate tau", "tau"), "candidate tau"),
    )
    for (a, b, c), (whose, role, (lr_what, lr_col), batch_what), letters in zip(
        axes, rows, ("abc", "def"), strict=True
    ):
        a.set_title(f"({letters[0]}) {whose}: {lr_what}, {lr}", loc="left")
        b.set_title(f"({letters[1]}) {whose}: {batch_what}, {batch}", loc="left")
        c.set_title(f"({letters[2]}) the same in examples", loc="left")
        _noise_lr(a, e6, lr, lr_col, fit_row(fits, entry.fit_of(f"{role}lr")), letters[0])
        if e7.empty:
            no_data(b, f"no {batch} runs")
            no_data(c, f"no {batch} runs")
            continue
        first = role == "author_"
        _noise_batch(
            b, c, e7, first, fits, entry.fit_of(f"{role}batch_steps"),
            entry.fit_of(f"{role}batch_examples"), batch_what,
        )  # fmt: skip
    return fig


def _noise_lr(
    ax: Axes, e6: pd.DataFrame, names: str, col: str, fit: pd.Series | None, letter: str
) -> None:
    """One lr panel (`letter`): `col` per run (tau, or the author's sampled window) and its
    fit."""
    if e6.empty:
        no_data(ax, f"no {names} runs")
        return
    if col == "tau":
        _, nc = tau_points(ax, *tau_budget_arrays(e6, "lr"), color="C0", label=f"runs ({names})")
        censored = nc > 0
    else:
        y = e6[col].to_numpy(float) if col in e6 else np.full(len(e6), np.nan)
        never = flag_col(e6, "transition_sampled_censored")
        dv = e6["diverged"].to_numpy(bool)
        closed = (
            e6["transition_end_sampled"].notna().to_numpy()
            if "transition_end_sampled" in e6
            else np.zeros(len(e6), bool)
        )
        ok = all_finite(e6["lr"], y) & (y > 0) & ~dv
        if not ok.any():
            no_data(ax, "no sampled windows")
            return
        ax.scatter(e6["lr"][ok], y[ok], s=16, color="C3", marker="D", label=f"runs ({names})")
        rest = ~ok & ~never & ~dv
        left = [
            f"{n} {what}"
            for n, what in (
                (int((never & ~dv).sum()), "never closed"),
                (int((rest & closed).sum()), "without a start"),
                (int((rest & ~closed).sum()), "with no sampled series"),
                (int(dv.sum()), "diverged"),
            )
            if n
        ]
        if left:
            note(ax, "not drawn:\n" + "\n".join(left), loc="lower right")
            drew(ax, "windows_not_drawn")
        censored = False
    fit_line(ax, fit, e6.loc[~e6["diverged"], "lr"], prefix=f"({letter}) fit")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("window (steps)" if col != "tau" else "tau (steps)")
    add_legend(ax, censored=censored, below=True)


def _noise_batch(
    b: Axes,
    c: Axes,
    e7: pd.DataFrame,
    first: bool,
    fits: pd.DataFrame,
    steps_fit: str,
    examples_fit: str,
    what: str,
) -> None:
    """The batch panels of one row: `what` (the author's logged first-target tau when
    `first`, else the candidate tau) in steps (b) and in examples seen (c), one colour and
    fit per K."""
    kcol = colors_for(e7["k"])
    cens = {"b": False, "c": False}
    cols = ("first_target_tau_log", "first_target_log_censored") if first else ("tau", "censored")
    for k, g in e7.groupby("k"):
        g = g.assign(**{cols[1]: as_bool(g[cols[1]]) | g[cols[0]].isna()})
        col = kcol.get(float(k), "0.5")
        x, t, budget, cen, dv = tau_budget_arrays(g, "batch_size", *cols)
        _, nc = tau_points(b, x, t, budget, cen, dv, color=col, label=f"K={fmt_value(k)}")
        cens["b"] |= nc > 0
        # Display only: examples seen = steps x batch size (tau and budget alike).
        _, nc = tau_points(c, x, t * x, budget * x, cen, dv, color=col, label=f"K={fmt_value(k)}")
        cens["c"] |= nc > 0
        for ax, name in ((b, steps_fit), (c, examples_fit)):
            fit_line(ax, fit_row(fits, f"{name}_at_k{fmt_value(k)}"), g["batch_size"], color=col,
                      prefix=f"K={fmt_value(k)} fit")  # fmt: skip
    for ax, key, ylabel in ((b, "b", f"{what} (steps)"), (c, "c", f"{what} x batch")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        add_legend(ax, censored=cens[key], below=True)


@paper_figure("init_scale")
def fig_init_scale(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """(a) tau vs init std of the `sweep` experiments (E15) with the `sweep` fit; (b) tau vs
    D under the default init (`default_init`: E1 + E2) and the alternative (`alternative_init`:
    E15_E1 + E15_E2), each with its role's fit."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.0))
    fits = tables["fits"]
    names = experiment_names(entry.experiments_of("sweep"))
    sweep = tau_rows(tables["tau"], entry.experiments_of("sweep"))
    any_cens = False
    placed = 0  # runs a log-log panel can place (a tau, or a budget > 0 if censored)
    if sweep.empty:
        no_data(a, f"no {names} runs")
    else:
        no, nc = tau_points(
            a, *tau_budget_arrays(sweep, "init_std"), color="C2", label=f"runs ({names})"
        )
        any_cens |= nc > 0
        if no + nc == 0:
            no_data(a, f"no {names} run with a tau or a budget > 0")
        else:
            fit_line(a, fit_row(fits, entry.fit_of("sweep")), sweep["init_std"])
            _tau_panel(a, "init std (every weight matrix)", "(a) tau vs init scale", any_cens)
    drawn = False
    for role, color, marker, label in (
        ("default_init", "C0", "o", "default init"),
        ("alternative_init", "C3", "s", "alternative init"),
    ):
        df = tau_rows(tables["tau"], entry.experiments_of(role)).drop_duplicates("run_id")
        if df.empty:
            continue
        scheme = ", ".join(sorted(set(df["init"].astype(str))))
        no, nc = tau_points(
            b, *tau_budget_arrays(df, "d"), color=color, marker=marker, label=f"{label} ({scheme})"
        )
        any_cens |= nc > 0
        placed += no + nc
        fit_line(b, fit_row(fits, entry.fit_of(role)), df["d"], color=color, prefix=label)
        drawn = True
    if not drawn or not placed:
        both = " or ".join(
            experiment_names(entry.experiments_of(r)) for r in ("default_init", "alternative_init")
        )
        no_data(b, f"no {both} run with a tau or a budget > 0")
    else:
        _tau_panel(b, "dataset size D (examples)", "(b) tau vs D under both inits", any_cens)
    return fig


def _tau_panel(ax: Axes, xlabel: str, title: str, censored: bool) -> None:
    """Log-log axes of tau (steps) against `xlabel`, titled, legend below."""
    tau_axes(ax, xlabel)
    ax.set_title(title, fontsize=8)
    add_legend(ax, censored=censored, below=True)

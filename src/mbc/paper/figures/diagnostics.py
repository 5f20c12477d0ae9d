"""Main-text figures of the post-hoc diagnostics (config `diagnostics`), along training in
units of tau: the collective transition (E8), selector routing (E9) and the Hessian (E10).
The onsets and fits they draw are their config `figures` entries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import Normalize, TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from mbc.diagnostics.hessian_table import long_table
from mbc.paper.config_sections import FigureEntry
from mbc.paper.figures.common import (
    TWO_COL,
    all_finite,
    as_bool,
    experiment_names,
    fit_row,
    fmt_value,
    numeric_cols,
    tau_rows,
    text_col,
)
from mbc.paper.figures.drawing import (
    add_legend,
    censored_runs_entry,
    colors_for,
    fit_line,
    hollow_markers,
    no_data,
)
from mbc.paper.figures.registry import paper_figure


def _tau_fraction(df: pd.DataFrame) -> np.ndarray:
    """x = step / tau: the table's tau_fraction where given, else step / tau (NaN if censored)."""
    tf = df["tau_fraction"].to_numpy(float)
    alt = df["step"].to_numpy(float) / df["tau"].to_numpy(float)
    return np.where(np.isfinite(tf), tf, alt)


def _along_training(df: pd.DataFrame, values: Iterable[str]) -> pd.DataFrame:
    """Rows of runs along training: k, tau, step, tau_fraction and `values` numeric, run_id
    as text, and (when there are rows) x = step / tau."""
    df = numeric_cols(df, ("k", "tau", "step", "tau_fraction", *values))
    df["run_id"] = text_col(df, "run_id")
    if not df.empty:
        df["x"] = _tau_fraction(df)
    return df


def _runs_by_k(df: pd.DataFrame) -> Iterator[tuple[pd.DataFrame, float, tuple | str]]:
    """Each run with a tau, in order of K: its rows sorted by x, its K and its K colour."""
    kcol = colors_for(df["k"])
    runs = df[np.isfinite(df["x"])].groupby("run_id")
    for _, g in sorted(runs, key=lambda kv: kv[1]["k"].min()):
        g = g.sort_values("x")
        k = float(g["k"].iloc[0])
        yield g, k, kcol.get(k, "0.5")


@paper_figure("collective")
def fig_collective(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Collective transition (E8): fraction of accurate groups and mean accuracy vs step / tau;
    histograms of per-group accuracy at 0.25, 0.5, 0.75 and 1.0 tau."""
    fractions = (0.25, 0.5, 0.75, 1.0)
    fig = plt.figure(figsize=(TWO_COL, 4.4))
    axes = fig.subplot_mosaic([["a"] * 4, ["h0", "h1", "h2", "h3"]], height_ratios=[1.3, 1])
    a = axes["a"]
    a.set_title("(a) groups solved vs step / tau", loc="left")
    s = _along_training(
        tables["collective_summary"], ("frac_accurate", "mean_accuracy", "accurate_threshold")
    )
    if s.empty:
        no_data(a, "empty collective_summary")
    else:
        seen_k: set[float] = set()
        for g, k, col in _runs_by_k(s):
            lab = None if k in seen_k else f"K={fmt_value(k)}"
            seen_k.add(k)
            a.plot(g["x"], g["frac_accurate"], "-o", ms=2.5, color=col, label=lab)
            a.plot(g["x"], g["mean_accuracy"], "--", color=col)
        a.axvline(1.0, color="0.5", lw=0.7, ls=":")
        a.axvline(0.5, color="0.7", lw=0.7, ls=":")
        thr = s["accurate_threshold"].dropna().unique()
        thr_txt = "/".join(f"{t:g}" for t in sorted(thr)) if thr.size else "threshold"
        style = [
            Line2D(
                [],
                [],
                color="0.3",
                marker="o",
                ms=2.5,
                label=f"fraction of groups \u2265 {thr_txt}",
            ),
            Line2D([], [], color="0.3", ls="--", label="mean group accuracy"),
        ]
        a.set_xlabel("step / tau")
        a.set_ylabel("fraction / accuracy")
        a.set_ylim(-0.03, 1.03)
        # Censored runs have no tau to normalise by: named in the legend, not dropped silently.
        style += censored_runs_entry(a, s.loc[~np.isfinite(s["x"]), "run_id"])
        add_legend(a, extra=style, loc="upper left")
        if not np.isfinite(s["x"]).any():
            no_data(a, "no run with a tau")

    c = _along_training(tables["collective"], ("accuracy",))
    kcol = colors_for(c["k"]) if not c.empty else {}
    bins = np.linspace(0.0, 1.0, 21)
    for i, f in enumerate(fractions):
        ax = axes[f"h{i}"]
        ax.set_title(f"({'bcde'[i]}) at {f:g} tau", loc="left")
        rows = c[np.isclose(c["x"], f, atol=1e-6)] if not c.empty else c
        rows = rows[np.isfinite(rows["accuracy"])] if not rows.empty else rows
        if rows.empty:
            no_data(ax, "no groups")
            continue
        for k, g in rows.groupby("k"):
            ax.hist(
                g["accuracy"].clip(0, 1),
                bins=bins,
                histtype="stepfilled",
                alpha=0.45,
                color=kcol.get(float(k), "0.5"),
                edgecolor=kcol.get(float(k), "0.5"),
                label=f"K={fmt_value(k)}",
            )
        if not s.empty and s["accurate_threshold"].notna().any():
            for t in s["accurate_threshold"].dropna().unique():
                ax.axvline(t, color="0.3", ls="--", lw=0.7)
        ax.set_xlim(0, 1)
        ax.set_xlabel("group accuracy")
        if i == 0:
            ax.set_ylabel("groups")
            ax.legend(loc="upper right")
    return fig


def _heatmap(ax: Axes, df: pd.DataFrame, value: str, *, signed: bool, label: str) -> None:
    """Layer x head heatmap of `value`, averaged over runs (display aggregation only)."""
    grid = df.pivot_table(index="layer", columns="head", values=value, aggfunc="mean")
    grid = grid.sort_index().sort_index(axis=1)
    data = np.ma.masked_invalid(grid.to_numpy(float))
    if signed:
        vmax = float(np.nanmax(np.abs(data.filled(np.nan)))) if data.count() else 1.0
        vmax = vmax if vmax > 0 else 1.0
        cmap, norm = plt.get_cmap("PuOr_r"), TwoSlopeNorm(0.0, -vmax, vmax)
    else:
        vals = data.compressed()
        cmap = plt.get_cmap("viridis")
        norm = Normalize(vals.min(), vals.max()) if vals.size else Normalize(0, 1)
    cmap = cmap.with_extremes(bad="0.85")
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", origin="upper")
    ax.set_xticks(range(grid.shape[1]), [fmt_value(h) for h in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [fmt_value(v) for v in grid.index])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.spines[:].set_visible(False)
    if grid.size <= 64:
        for (i, j), v in np.ndenumerate(grid.to_numpy(float)):
            if np.isfinite(v):
                rgba = cmap(norm(v))
                light = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] > 0.55
                ax.text(
                    j,
                    i,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="black" if light else "white",
                )
    cb = ax.figure.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cb.set_label(label, fontsize=6.5)
    cb.ax.tick_params(labelsize=6.5)


@paper_figure("routing")
def fig_routing(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Selector routing (E9): attention to z and zero-ablation effect per head at tau; lead of
    the delta_z onset over the loss onset per run of the `onsets` experiments (E1)."""
    onsets = experiment_names(entry.experiments_of("onsets"))
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(TWO_COL, 2.5))
    a.set_title("(a) attention to z, mid", loc="left")
    b.set_title("(b) zero-ablation $\\Delta$loss, mid", loc="left")
    c.set_title(f"(c) onsets ({onsets})", loc="left")
    cols = ("k", "tau", "step", "layer", "head")
    att = numeric_cols(tables["routing_attention"], (*cols, "attn_to_z"))
    att = att[text_col(att, "phase") == "mid"].dropna(subset=["layer", "head"])
    if att.empty or not att["attn_to_z"].notna().any():
        no_data(a, "no mid-phase attention")
    else:
        _heatmap(a, att, "attn_to_z", signed=False, label="attention to z")
        n_runs = att["run_id"].nunique() if "run_id" in att.columns else 0
        runs = "1 run" if n_runs == 1 else f"mean of {n_runs} runs"
        a.set_title(f"(a) attention to z, mid ({runs})", loc="left")
    abl = numeric_cols(tables["routing_ablation"], (*cols, "delta_loss", "delta_delta_z"))
    keep = (text_col(abl, "phase") == "mid") & (text_col(abl, "kind") == "zero")
    abl = abl[keep].dropna(subset=["layer", "head"])
    if abl.empty or not abl["delta_loss"].notna().any():
        no_data(b, "no mid-phase zero ablation")
    else:
        _heatmap(b, abl, "delta_loss", signed=True, label="$\\Delta$ loss (nats)")

    tau = tau_rows(tables["tau"], entry.experiments_of("onsets")).drop_duplicates("run_id")
    if tau.empty:
        no_data(c, f"no {onsets} runs")
        return fig
    lo, dz, budget = (tau[col].to_numpy(float) for col in ("loss_onset", "delta_z_onset", "steps"))
    both = all_finite(lo, dz)
    # A run whose onset never came is drawn at its budget on that axis (hollow triangle).
    part = ~both & np.isfinite(budget)
    x_part = np.where(np.isfinite(lo), lo, budget)
    y_part = np.where(np.isfinite(dz), dz, budget)
    if not (both.any() or part.any()):
        no_data(c, "no onsets")
        return fig
    kcol = colors_for(tau["k"])
    for k in sorted(kcol):
        sel = tau["k"].to_numpy(float) == k
        col = kcol[k]
        c.scatter(
            lo[sel & both], dz[sel & both], s=14, color=col, label=f"K={fmt_value(k)}", zorder=3
        )
        if (sel & part).any():
            hollow_markers(c, x_part[sel & part], y_part[sel & part], col, element="onset_not_reached",
                    s=18, marker="^")  # fmt: skip
    vals = np.concatenate([lo[both], dz[both], x_part[part], y_part[part]])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    if vals.size:
        span = np.array([vals.min() / 1.3, vals.max() * 1.3])
        c.plot(span, span, color="0.4", ls=":", lw=0.8, label="y = x (no lead)")
        c.set_xscale("log")
        c.set_yscale("log")
    c.set_xlabel("loss onset (step)")
    c.set_ylabel(r"$\Delta_z$ onset (step)")
    extra = []
    if part.any():
        extra.append(
            Line2D(
                [],
                [],
                marker="^",
                ls="none",
                mfc="none",
                mec="0.3",
                label="onset not reached (at budget)",
            )
        )
    add_legend(c, extra=extra, below=True, fontsize=6.5)  # under the panel: it covers no point
    return fig


@paper_figure("hessian")
def fig_hessian(tables: dict[str, pd.DataFrame], entry: FigureEntry) -> Figure:
    """Hessian extremes along training (E10) by the first estimator (config
    `diagnostics.hessian.methods`); anisotropy vs K at the plateau phase by every estimator,
    each with the fit in its role (`OPEN_ROLES`: the roles are estimators)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.2))
    a.set_title(r"(a) $\lambda_\max$ and $|\lambda_\min|$ along training", loc="left")
    b.set_title("(b) anisotropy on the plateau", loc="left")
    h = _along_training(
        long_table(tables["hessian"]),
        ("lambda_max", "lambda_min", "residual_max", "residual_min", "anisotropy"),
    )
    for col in ("converged_max", "converged_min"):
        h[col] = as_bool(h[col]) if col in h.columns else False
    if h.empty:
        no_data(a, "empty hessian table")
        no_data(b, "empty hessian table")
        return fig
    methods = list(dict.fromkeys(text_col(h, "method")))  # the table's order: config's
    h["abs_min"] = h["lambda_min"].abs()
    plateau = h[text_col(h, "phase") == "plateau"]
    h = h[text_col(h, "method") == methods[0]]
    seen: set[float] = set()
    any_hollow = False
    for g, k, col in _runs_by_k(h):
        for ycol, rcol, ccol, ls, mk in (
            ("lambda_max", "residual_max", "converged_max", "-", "o"),
            ("abs_min", "residual_min", "converged_min", "--", "s"),
        ):
            ok = all_finite(g["x"], g[ycol]) & (g[ycol].to_numpy(float) > 0)
            gg = g[ok]
            if gg.empty:
                continue
            lab = f"K={fmt_value(k)}" if (ycol == "lambda_max" and k not in seen) else None
            if lab:
                seen.add(k)
            a.plot(gg["x"], gg[ycol], ls=ls, color=col, lw=0.9, label=lab)
            y = gg[ycol].to_numpy(float)
            r = gg[rcol].to_numpy(float)
            # Residual ||Hv - lambda v|| as an error bar (clipped to stay positive on log y).
            err = np.where(np.isfinite(r), r, 0.0)
            a.errorbar(
                gg["x"],
                y,
                yerr=[np.minimum(err, 0.95 * y), err],
                fmt="none",
                ecolor=col,
                elinewidth=0.5,
                alpha=0.6,
                capsize=0,
            )
            conv = gg[ccol].to_numpy(bool)
            a.scatter(gg["x"][conv], y[conv], marker=mk, s=12, color=col, zorder=3)
            hollow_markers(
                a, gg["x"][~conv], y[~conv], col, element="not_converged", marker=mk, s=12
            )
            any_hollow |= bool((~conv).any())
    if seen:
        a.set_yscale("log")
        a.axvline(1.0, color="0.5", ls=":", lw=0.7)
        a.set_xlabel("step / tau")
        a.set_ylabel("eigenvalue estimate")
        extra = [
            Line2D([], [], color="0.3", marker="o", ms=3, label=r"$\lambda_\max$"),
            Line2D([], [], color="0.3", ls="--", marker="s", ms=3, label=r"$|\lambda_\min|$"),
        ]
        if any_hollow:
            extra.append(
                Line2D(
                    [],
                    [],
                    ls="none",
                    marker="o",
                    mfc="none",
                    mec="0.3",
                    ms=3,
                    label="not converged (hollow)",
                )
            )
        extra += censored_runs_entry(a, h.loc[~np.isfinite(h["x"]), "run_id"])
        add_legend(a, extra=extra, below=True, ncol=3, columnspacing=1.0)
    else:
        no_data(a, "no positive eigenvalue estimates")

    p = plateau[all_finite(plateau["k"], plateau["anisotropy"]) & (plateau["k"] > 0)]
    p = p[p["anisotropy"] > 0]
    if p.empty:
        no_data(b, "no plateau-phase estimates")
        return fig
    for i, (method, marker) in enumerate(zip(methods, "o^sDv<>", strict=False)):
        pm, color = p[text_col(p, "method") == method], f"C{i}"
        conv = (pm["converged_max"] & pm["converged_min"]).to_numpy(bool)
        b.scatter(
            pm["k"][conv],
            pm["anisotropy"][conv],
            s=16,
            marker=marker,
            color=color,
            label=f"{method}, both ends converged",
            zorder=3,
        )
        if (~conv).any():
            hollow_markers(
                b,
                pm["k"][~conv],
                pm["anisotropy"][~conv],
                color,
                element="not_converged",
                marker=marker,
                s=16,
                label=f"{method}, not converged",
            )
        if (fit := entry.fits.get(method)) is not None:  # no role: drawn without a line
            row = fit_row(tables["fits"], fit)
            fit_line(b, row, pm["k"], color=color, prefix=f"{method} fit", unit="estimate")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("K")
    b.set_ylabel(r"$|\lambda_\max / \lambda_\min|$")
    add_legend(b, below=True, ncol=2)
    return fig

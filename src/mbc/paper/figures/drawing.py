"""The drawing helpers every figure shares: censored and diverged markers, fitted lines
read from `fits`, legends that keep off the data, log axes, run curves."""

from __future__ import annotations

import math
from collections.abc import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import offset_copy

from mbc.paper.figures.common import CENSORED_LABEL, DIVERGED_LABEL, DIVERGED_STYLE, all_finite
from mbc.paper.figures.drawn import absent, drew


def no_data(ax: Axes, what: str) -> None:
    """Mark a panel that has nothing to show (empty table or missing experiment)."""
    ax.text(
        0.5,
        0.5,
        f"no data\n({what})",
        transform=ax.transAxes,
        ha="center",
        va="center",
        color="0.4",
        fontsize=8,
        style="italic",
    )
    ax.set_xticks([])
    ax.set_yticks([])


def note(ax: Axes, text: str, loc: str = "lower right") -> None:
    x, ha = (0.98, "right") if "right" in loc else (0.02, "left")
    y, va = (0.02, "bottom") if "lower" in loc else (0.98, "top")
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=6.5, color="0.35")


def colors_for(values: Iterable[float], cmap: str = "viridis") -> dict[float, tuple]:
    """One colour per distinct value, ordered (viridis, without its faint yellow end)."""
    vals = sorted({float(v) for v in values if np.isfinite(v)})
    cm = plt.get_cmap(cmap)
    if len(vals) <= 1:
        return {v: cm(0.25) for v in vals}
    return {v: cm(0.85 * i / (len(vals) - 1)) for i, v in enumerate(vals)}


def censored_handle(color: str = "0.3") -> Line2D:
    return Line2D([], [], marker="^", ls="none", mfc="none", mec=color, ms=5, label=CENSORED_LABEL)


def add_legend(
    ax: Axes,
    *,
    censored: bool = False,
    extra: Iterable = (),
    below: bool = False,
    under_figure: bool = False,
    also: Iterable[Axes] = (),
    **kw,
) -> None:
    """Legend of the labelled artists (of `ax` and `also`), plus the censored proxy when any
    censored run is drawn. `below`: under the axes (clear of the x label), for long labels;
    `under_figure`: centred under all panels, one legend for a figure whose panels share it
    (the layout makes room for it)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in also:
        h, lab = other.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    keep = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab != CENSORED_LABEL]
    firsts = [i for i, (_, lab) in enumerate(keep) if lab == DIVERGED_LABEL][:1]
    keep = [hl for i, hl in enumerate(keep) if hl[1] != DIVERGED_LABEL or i in firsts]
    handles, labels = [h for h, _ in keep], [lab for _, lab in keep]
    for h in extra:
        handles.append(h)
        labels.append(h.get_label())
    if censored:
        h = censored_handle()
        handles.append(h)
        labels.append(h.get_label())
    if not handles:
        return
    if under_figure:
        ax.figure.legend(handles, labels, loc="outside lower center", **kw)
        return
    if below:
        kw.setdefault("loc", "upper center")
        kw["bbox_to_anchor"] = (0.5, 0.0)
        kw["bbox_transform"] = offset_copy(ax.transAxes, fig=ax.figure, y=-30, units="points")
    ax.legend(handles, labels, **kw)


def data_points(ax: Axes) -> np.ndarray:
    """The markers `ax` draws (scatter offsets, marked lines), in axes fraction."""
    pts = [
        c.get_offset_transform().transform(np.asarray(c.get_offsets(), float))
        for c in ax.collections
        if isinstance(c, PathCollection) and len(c.get_offsets())
    ] + [
        ln.get_transform().transform(ln.get_xydata())
        for ln in ax.lines
        if ln.get_marker() not in (None, "None", "", " ") and len(ln.get_xydata())
    ]
    if not pts:
        return np.empty((0, 2))
    p = ax.transAxes.inverted().transform(np.concatenate(pts))
    return p[np.isfinite(p).all(axis=1)]


def free_corner(
    ax: Axes, size: tuple[float, float], labels: tuple[float, float] = (0.1, 0.08)
) -> list[float]:
    """Bounds (axes fraction) for an inset of `size` in the corner of `ax` whose box, with
    room for the inset's tick labels (`labels`, left and below it), covers the fewest of
    `ax`'s markers: upper left, upper right, lower right, lower left, first on a tie."""
    ax.autoscale_view()
    pts = data_points(ax)
    (w, h), (lx, ly), edge = size, labels, 0.03
    corners = [
        (lx, 1 - h - edge),
        (1 - w - edge, 1 - h - edge),
        (1 - w - edge, ly),
        (lx, ly),
    ]

    def covered(x0: float, y0: float) -> int:
        inside = (pts[:, 0] >= x0 - lx) & (pts[:, 0] <= x0 + w)
        return int((inside & (pts[:, 1] >= y0 - ly) & (pts[:, 1] <= y0 + h)).sum())

    x0, y0 = min(corners, key=lambda c: covered(*c))
    return [x0, y0, w, h]


def _log_label(v: float, _pos=None) -> str:
    """Compact log-axis tick label: plain numbers in [0.01, 10^4), else a x 10^n."""
    if not (np.isfinite(v) and v > 0):
        return ""
    if 1e-2 <= v < 1e4:
        return f"{v:g}"
    e = math.floor(math.log10(v) + 1e-9)
    m = v / 10**e
    return f"$10^{{{e}}}$" if abs(m - 1) < 1e-6 else f"${m:g}\\times10^{{{e}}}$"


def tidy_log_axes(fig: Figure) -> None:
    """Readable log axes: a few labelled majors (1-2-5 on short spans), unlabelled minors."""
    axes = list(fig.axes)
    axes += [c for a in fig.axes for c in a.child_axes]
    for a in axes:
        for axis, lim in ((a.xaxis, a.get_xlim), (a.yaxis, a.get_ylim)):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(lim())
            if not (lo > 0 and np.isfinite(hi)):
                continue
            if hi / lo < 1.5:  # one value (a flat fit through alike runs): a sliver, no tick
                mid = math.sqrt(lo * hi)
                lo, hi = mid / 2, mid * 2
                (a.set_xlim if axis is a.xaxis else a.set_ylim)(lo, hi)
            base = getattr(axis.get_transform(), "base", 10)
            axis.set_minor_formatter(NullFormatter())
            if base != 10:
                axis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
                continue
            span = math.log10(hi / lo)
            plain = lo >= 1e-2 and hi < 1e4  # labels print as plain numbers (narrow)
            if span < 1.0:
                subs = (1.0, 2.0, 3.0, 5.0) if plain and span < 0.7 else (1.0, 2.0, 5.0)
            elif span < 2.5 and plain:
                subs = (1.0, 2.0, 5.0) if span < 1.5 else (1.0, 3.0)
            else:
                subs = (1.0,)
            axis.set_major_locator(LogLocator(10, subs=subs))
            axis.set_major_formatter(FuncFormatter(_log_label))


def hollow_markers(ax: Axes, x, y, color, *, element: str, **kw) -> None:
    """Hollow markers (censored, onset not reached, not converged): edge colour only;
    `element`: what they are, for the caption (`mbc.paper.figures.drawn`)."""
    ax.scatter(x, y, facecolors="none", edgecolors=color, zorder=3, **kw)
    if np.size(x):
        drew(ax, element)


def tau_points(
    ax: Axes,
    x: np.ndarray,
    tau: np.ndarray,
    budget: np.ndarray,
    censored: np.ndarray,
    diverged: np.ndarray | None = None,
    *,
    color,
    marker: str = "o",
    label: str | None = None,
    positive: bool = True,
    size: float = 16,
) -> tuple[int, int]:
    """Observed taus as filled markers, censored runs as hollow triangles at their budget,
    diverged runs as crosses (x) at the step they were stopped (`budget`: tau.csv `steps`).

    Returns (number observed drawn, number censored drawn).
    """
    x, tau, budget = (np.asarray(a, dtype=float) for a in (x, tau, budget))
    censored = np.asarray(censored, dtype=bool)
    dv = np.zeros_like(censored) if diverged is None else np.array(diverged, dtype=bool)
    obs = ~censored & ~dv & all_finite(x, tau)
    cen = censored & ~dv & all_finite(x, budget)
    dv &= all_finite(x, budget)
    if positive:
        obs &= (x > 0) & (tau > 0)
        cen &= (x > 0) & (budget > 0)
        dv &= (x > 0) & (budget > 0)
    if dv.any():
        ax.scatter(x[dv], budget[dv], s=size * 1.5, label=DIVERGED_LABEL, **DIVERGED_STYLE)
        drew(ax, "diverged")
    if obs.any() or (label and not cen.any()):
        ax.scatter(x[obs], tau[obs], s=size, marker=marker, color=color, label=label, zorder=3)
    if cen.any():
        lab = None if obs.any() else label
        hollow_markers(ax, x[cen], budget[cen], color, element="censored", s=size * 1.3, marker="^",
                linewidths=0.9, label=lab)  # fmt: skip
    return int(obs.sum()), int(cen.sum())


def _fit_label(row: pd.Series, prefix: str = "fit") -> str:
    """Legend text of a drawn `fits` row: the exponent on line 1, its CI and censoring on
    line 2."""
    e, lo, hi = row["exponent"], row["ci_low"], row["ci_high"]
    level = row["ci_level"]
    details = []
    if np.isfinite(lo) and np.isfinite(hi):
        lev = f"{100 * level:.0f}% " if np.isfinite(level) else ""
        details.append(f"{lev}CI [{lo:.3f}, {hi:.3f}]")
    nc = row["n_censored"]
    if np.isfinite(nc) and nc > 0:
        details.append(f"{int(nc)} censored")
    tail = "\n" + ", ".join(details) if details else ""
    return f"{prefix}: slope {e:.3f}{tail}"


def _no_fit_reason(row: pd.Series, unit: str) -> str:
    """Why a `fits` row has no line, in words: its uncensored `unit`s, too few for a fit."""
    n = row.get("n", math.nan)
    n = 0 if not np.isfinite(n) else int(n - (row.get("n_censored", 0) or 0))
    return f"{n} {unit}{'' if n == 1 else 's'}"


def fit_line(
    ax: Axes,
    row: pd.Series | None,
    xs: Iterable[float],
    *,
    color="0.2",
    prefix: str = "fit",
    element: str = "fit",
    unit: str = "uncensored run",
) -> bool:
    """Draw prefactor * x**exponent from a `fits` row over the range of `xs` (log axes).
    A row with no exponent draws nothing and no legend entry: it is recorded as absent,
    with its uncensored runs (`unit`), for the caption (`element`, `mbc.paper.figures.drawn`)."""
    if row is None:
        absent(ax, element, f"{prefix}: not fitted")
        return False
    xs = np.asarray([v for v in xs if np.isfinite(v) and v > 0], dtype=float)
    e, c = row["exponent"], row["prefactor"]
    if not (np.isfinite(e) and np.isfinite(c) and c > 0):
        absent(ax, element, f"{prefix}: {_no_fit_reason(row, unit)}")
        return False
    if xs.size == 0:
        absent(ax, element, f"{prefix}: no run to draw it over")
        return False
    lo, hi = xs.min(), xs.max()
    if lo == hi:
        lo, hi = lo / 1.5, hi * 1.5
    grid = np.geomspace(lo, hi, 64)
    ax.plot(
        grid, c * grid**e, ls="--", lw=0.9, color=color, label=_fit_label(row, prefix), zorder=2
    )
    drew(ax, element)
    return True


def tau_budget_arrays(
    df: pd.DataFrame, x: str, tau: str = "tau", censored: str = "censored"
) -> tuple[np.ndarray, ...]:
    """`tau_points`' arrays: x, a tau column (the candidate tau, or another crossing with
    its own censoring column), the budget (`steps`), censored and diverged."""
    floats = [df[c].to_numpy(float) for c in (x, tau, "steps")]
    return (*floats, *(df[c].to_numpy(bool) for c in (censored, "diverged")))


def _normalised_loss(m: pd.DataFrame, k: float) -> np.ndarray:
    """Candidate loss in units of log K (display only: the plateau sits at 1)."""
    if not (np.isfinite(k) and k > 1):
        return np.full(len(m), np.nan)
    return m["candidate_loss"].to_numpy(float) / math.log(k)


def _value_at(steps: np.ndarray, values: np.ndarray, at: float) -> float:
    ok = all_finite(steps, values)
    if not ok.any() or not np.isfinite(at):
        return math.nan
    return float(np.interp(at, steps[ok], values[ok]))


def run_curves(
    ax_loss: Axes,
    ax_dz: Axes | None,
    m: pd.DataFrame,
    row: pd.Series,
    *,
    color,
    ls: str = "-",
    label: str | None = None,
) -> bool:
    """One run's L_cand / log K (and delta_z) vs step, with tau (or its censoring) marked.

    Returns whether the run is censored and was marked as such. A diverged run's curve ends
    in a cross (x) at the last finite value before the step it was stopped.
    """
    m = m[m["step"] > 0].sort_values("step")  # log x axis
    steps = m["step"].to_numpy(float)
    y = _normalised_loss(m, row["k"])
    ax_loss.plot(steps, y, ls=ls, color=color, label=label)
    if ax_dz is not None:
        ax_dz.plot(steps, m["delta_z"].to_numpy(float), ls=ls, color=color, label=label)
    if row.get("diverged", False):
        ok = all_finite(steps, y)
        if ok.any():
            last = np.flatnonzero(ok)[-1]
            ax_loss.plot(
                [steps[last]], [y[last]], ls="none", label=DIVERGED_LABEL, **DIVERGED_STYLE
            )
            drew(ax_loss, "diverged")
        return False
    if not row["censored"]:
        t = row["tau"]
        ax_loss.plot([t], [_value_at(steps, y, t)], "o", color=color, mec="white", mew=0.5)
        if ax_dz is not None:
            dz = m["delta_z"].to_numpy(float)
            ax_dz.plot([t], [_value_at(steps, dz, t)], "o", color=color, mec="white", mew=0.5)
        return False
    b = row["steps"] if np.isfinite(row["steps"]) else (steps[-1] if steps.size else math.nan)
    if not np.isfinite(b):
        return False
    kw = dict(marker="^", ls="none", mfc="none", mec=color, ms=5, mew=0.9)
    ax_loss.plot([b], [_value_at(steps, y, b)], **kw)
    drew(ax_loss, "censored")
    if ax_dz is not None:
        ax_dz.plot([b], [_value_at(steps, m["delta_z"].to_numpy(float), b)], **kw)
    return True


def censored_runs_entry(ax: Axes, run_ids: Iterable[str]) -> list[Line2D]:
    """A legend entry (for `ax`) naming censored runs that a step / tau axis cannot place."""
    ids = sorted({str(r) for r in run_ids})
    if not ids:
        return []
    drew(ax, "censored_named")
    shown = ", ".join(ids[:4]) + (f" (+{len(ids) - 4})" if len(ids) > 4 else "")
    label = f"{CENSORED_LABEL}, not shown: {shown}"
    return [Line2D([], [], marker="^", ls="none", mfc="none", mec="0.3", ms=5, label=label)]


def tau_marker_handle() -> Line2D:
    return Line2D([], [], marker="o", ls="none", color="0.3", mec="white", label="tau")


def tau_axes(ax: Axes, xlabel: str) -> None:
    """Log-log axes of tau (steps) against `xlabel`."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tau (steps)")


def threshold_lines(ax: Axes, thresholds: Iterable[float]) -> None:
    ax.axhline(1.0, color="0.4", ls=":", lw=0.8, label="log K (plateau)")
    for thr in sorted({float(t) for t in thresholds if np.isfinite(t)}):
        ax.axhline(thr, color="0.4", ls="--", lw=0.8, label=f"threshold {thr:g} log K")

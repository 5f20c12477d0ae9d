"""Shared by every figure: the registry (`FIGURES`, `TABLES_NEEDED`, `render`), the style
and atomic saving, and the table and drawing helpers (typed tau rows, censored markers,
fitted lines read from `fits`, legends, log axes)."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import offset_copy

from mbc.core.artifacts import read_csv_checked, write_bytes_atomic
from mbc.core.report_sections import FigureEntry
from mbc.paper.figure_tables import FIGURE_TABLES

STYLE = Path(__file__).parent / "mbc.mplstyle"
DPI = 150
CENSORED_LABEL = "censored (tau > budget)"
# a diverged run (docs/method.md#divergence): a cross (x) at the step it was stopped
DIVERGED_LABEL = "diverged (stopped)"
DIVERGED_STYLE = dict(marker="x", color="C3", zorder=4)
ONE_COL = 3.4  # inches: one-column figure width
TWO_COL = 7.0  # inches: figures with two or three side-by-side panels

FigureFn = Callable[[Mapping[str, pd.DataFrame], Path, Path, FigureEntry], None]
FIGURES: dict[str, FigureFn] = {}
TABLES_NEEDED: dict[str, list[str]] = {}

_TAU_NUMERIC = (
    "init_std", "init_scale", "k", "n_groups", "d", "lr", "batch_size", "z_length",
    "n_supergroups", "sharing_factor", "label_noise", "seed", "threshold", "tau", "plateau_height", "height_over_log_k",
    "final_candidate_loss", "final_candidate_accuracy", "steps", "loss_onset",
    "delta_z_onset", "lead", "lead_fraction", "first_target_tau_log", "lag_step",
    "transition_duration_sampled", "final_first_target_loss",
)  # fmt: skip
_METRICS_NUMERIC = (
    "step", "examples_seen", "train_loss", "loss", "first_target_loss", "candidate_loss",
    "candidate_accuracy", "shuffled_loss", "delta_z", "grad_norm", "wall_s",
)  # fmt: skip
_FIT_NUMERIC = (
    "exponent", "ci_low", "ci_high", "prefactor", "r2", "n", "n_censored", "ci_level", "n_boot",
)  # fmt: skip


# --------------------------------------------------------------------------- registry, I/O


def _register(name: str, needs: Iterable[str]) -> Callable:
    """Turn a drawing function ``draw(tables, entry) -> Figure`` into ``fig_<name>`` and
    register it. `needs` must be what `mbc.paper.figure_tables` declares (what the rule gives
    it); `entry` is the figure's config `figures` entry (its experiments and fits, by role)."""
    needs = list(needs)
    if FIGURE_TABLES.get(name) != needs:
        raise RuntimeError(
            f"figure {name!r} reads {needs}; mbc.paper.figure_tables declares "
            f"{FIGURE_TABLES.get(name)}"
        )

    def deco(draw: Callable[[dict[str, pd.DataFrame], FigureEntry], Figure]) -> FigureFn:
        def fig_fn(
            tables: Mapping[str, pd.DataFrame], out_pdf: Path, out_png: Path, entry: FigureEntry
        ) -> None:
            if entry.name != name:
                raise ValueError(f"figure {name!r} given the config entry of {entry.name!r}")
            full = {t: pd.DataFrame() if tables.get(t) is None else tables[t] for t in needs}
            before = set(plt.get_fignums())
            try:
                with plt.style.context(STYLE):
                    fig = draw(full, entry)
                    _unlog_empty_axes(fig)
                    _tidy_log_axes(fig)
                    _save(fig, Path(out_pdf), Path(out_png))
            finally:  # close what this call opened, also when drawing fails
                for num in set(plt.get_fignums()) - before:
                    plt.close(num)

        fig_fn.__name__ = fig_fn.__qualname__ = draw.__name__
        fig_fn.__doc__ = draw.__doc__
        fig_fn.__module__ = draw.__module__
        FIGURES[name] = fig_fn
        TABLES_NEEDED[name] = needs
        return fig_fn

    return deco


def _save(fig: Figure, out_pdf: Path, out_png: Path) -> None:
    """Save the figure as PDF and PNG: into memory first, then an atomic write each.

    The layout is solved once (for the PDF) and frozen for the PNG: same placement, half the
    layout cost.
    """
    for path, fmt, meta in (
        (out_pdf, "pdf", {"CreationDate": None}),  # reproducible bytes
        (out_png, "png", {"Software": None}),
    ):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
        fig.set_layout_engine("none")
        write_bytes_atomic(path, buf.getvalue())


def _unlog_empty_axes(fig: Figure) -> None:
    """A log axis with no value > 0 to show (every run censored at a budget of 0, nothing
    measured) cannot be drawn: such a panel goes linear and says it has no data."""
    for ax in [a for top in fig.axes for a in (top, *top.child_axes)]:  # insets too
        for i, axis in enumerate((ax.xaxis, ax.yaxis)):
            pts = [ln.get_xydata() for ln in ax.lines] + [c.get_offsets() for c in ax.collections]
            v = np.concatenate([np.asarray(p, float).reshape(-1, 2)[:, i] for p in pts] + [[]])
            if axis.get_scale() == "log" and not (np.isfinite(v) & (v > 0)).any():
                (ax.set_xscale, ax.set_yscale)[i]("linear")
                if not any(t.get_text().startswith("no data") for t in ax.texts):
                    _no_data(ax, "nothing > 0 to place on its log axis")


def render(
    name: str,
    table_paths: Mapping[str, str | Path],
    out_pdf: str | Path,
    out_png: str | Path,
    entry: FigureEntry,
) -> None:
    """Draw figure `name` from the CSV tables it needs, as its config `figures` entry says."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    missing = [t for t in TABLES_NEEDED[name] if t not in table_paths]
    if missing:
        raise KeyError(f"figure {name!r} needs tables {missing} (got {sorted(table_paths)})")
    tables = {t: read_csv_checked(table_paths[t]) for t in TABLES_NEEDED[name]}
    FIGURES[name](tables, Path(out_pdf), Path(out_png), entry)


# --------------------------------------------------------------------------- table helpers


def _numeric(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    """A copy with `cols` numeric (bad values -> NaN); absent columns are added as NaN."""
    df = df.copy()
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan
    return df


def _as_bool(s: pd.Series) -> pd.Series:
    """CSV booleans (True/False, true/false, 1/0, strings) -> bool; missing -> False."""
    if s.dtype == bool:
        return s
    return s.map(lambda v: str(v).strip().lower() in {"true", "1", "1.0", "yes"}).astype(bool)


def _text_col(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col].astype(str) if col in df.columns else pd.Series("", index=df.index)


def _tau_rows(tau: pd.DataFrame, experiments: Iterable[str] | None = None) -> pd.DataFrame:
    """Rows of the tau table (of `experiments`, when given) with typed columns.

    `censored` is True where the table says so or tau is missing; such a run is drawn at its
    step budget (`steps`).
    """
    df = _numeric(tau, _TAU_NUMERIC)
    for c in ("run_id", "experiment", "task", "model", "init", "sharing"):
        df[c] = _text_col(df, c)
    if experiments is not None:
        df = df[df["experiment"].isin(list(experiments))]
    flag = _as_bool(df["censored"]) if "censored" in df.columns else False
    df["diverged"] = _as_bool(df["diverged"]) if "diverged" in df.columns else False
    df["censored"] = (flag | df["tau"].isna()) & ~df["diverged"]  # diverged: never censored
    return df.reset_index(drop=True)


def _metrics_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(metrics, _METRICS_NUMERIC)
    df["run_id"] = _text_col(df, "run_id")
    return df


def _one_seed_per(df: pd.DataFrame, by: str | list[str]) -> pd.DataFrame:
    """The lowest-seed row of each value of `by` (a representative curve per setting)."""
    if df.empty:
        return df
    by = [by] if isinstance(by, str) else by
    return df.sort_values([*by, "seed", "run_id"]).drop_duplicates(by).reset_index(drop=True)


def _fit_row(fits: pd.DataFrame, name: str) -> pd.Series | None:
    if fits is None or fits.empty or "name" not in fits.columns:
        return None
    df = _numeric(fits, _FIT_NUMERIC)
    rows = df[df["name"].astype(str) == name]
    return None if rows.empty else rows.iloc[0]


def _names(experiments: Iterable[str]) -> str:
    """A role's experiments in a label: E1/E2."""
    return "/".join(experiments)


def _fmt(v: float) -> str:
    """A number for a label: integers without a decimal point, others in %g."""
    if v is None or not np.isfinite(v):
        return "n/a"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _finite(*arrays: np.ndarray) -> np.ndarray:
    out = np.ones(len(arrays[0]), dtype=bool)
    for a in arrays:
        out &= np.isfinite(np.asarray(a, dtype=float))
    return out


# --------------------------------------------------------------------------- drawing helpers


def _no_data(ax: Axes, what: str) -> None:
    """Mark a panel that has nothing to show (empty table or missing experiment)."""
    ax.text(0.5, 0.5, f"no data\n({what})", transform=ax.transAxes, ha="center", va="center",
            color="0.4", fontsize=8, style="italic")  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


def _note(ax: Axes, text: str, loc: str = "lower right") -> None:
    x, ha = (0.98, "right") if "right" in loc else (0.02, "left")
    y, va = (0.02, "bottom") if "lower" in loc else (0.98, "top")
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=6.5, color="0.35")


def _colors(values: Iterable[float], cmap: str = "viridis") -> dict[float, tuple]:
    """One colour per distinct value, ordered (viridis, without its faint yellow end)."""
    vals = sorted({float(v) for v in values if np.isfinite(v)})
    cm = plt.get_cmap(cmap)
    if len(vals) <= 1:
        return {v: cm(0.25) for v in vals}
    return {v: cm(0.85 * i / (len(vals) - 1)) for i, v in enumerate(vals)}


def _censored_handle(color: str = "0.3") -> Line2D:
    return Line2D([], [], marker="^", ls="none", mfc="none", mec=color, ms=5, label=CENSORED_LABEL)


def _legend(
    ax: Axes,
    *,
    censored: bool = False,
    extra: Iterable = (),
    below: bool = False,
    also: Iterable[Axes] = (),
    **kw,
) -> None:
    """Legend of the labelled artists (of `ax` and `also`), plus the censored proxy when any
    censored run is drawn. `below`: under the axes (clear of the x label), for long labels."""
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
        h = _censored_handle()
        handles.append(h)
        labels.append(h.get_label())
    if not handles:
        return
    if below:
        kw.setdefault("loc", "upper center")
        kw["bbox_to_anchor"] = (0.5, 0.0)
        kw["bbox_transform"] = offset_copy(ax.transAxes, fig=ax.figure, y=-30, units="points")
    ax.legend(handles, labels, **kw)


def _log_label(v: float, _pos=None) -> str:
    """Compact log-axis tick label: plain numbers in [0.01, 10^4), else a x 10^n."""
    if not (np.isfinite(v) and v > 0):
        return ""
    if 1e-2 <= v < 1e4:
        return f"{v:g}"
    e = math.floor(math.log10(v) + 1e-9)
    m = v / 10**e
    return f"$10^{{{e}}}$" if abs(m - 1) < 1e-6 else f"${m:g}\\times10^{{{e}}}$"


def _tidy_log_axes(fig: Figure) -> None:
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


def _hollow(ax: Axes, x, y, color, **kw) -> None:
    """Hollow markers (censored, onset not reached, not converged): edge colour only."""
    ax.scatter(x, y, facecolors="none", edgecolors=color, zorder=3, **kw)


def _tau_points(
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
    obs = ~censored & ~dv & _finite(x, tau)
    cen = censored & ~dv & _finite(x, budget)
    dv &= _finite(x, budget)
    if positive:
        obs &= (x > 0) & (tau > 0)
        cen &= (x > 0) & (budget > 0)
        dv &= (x > 0) & (budget > 0)
    if dv.any():
        ax.scatter(x[dv], budget[dv], s=size * 1.5, label=DIVERGED_LABEL, **DIVERGED_STYLE)
    if obs.any() or (label and not cen.any()):
        ax.scatter(x[obs], tau[obs], s=size, marker=marker, color=color, label=label, zorder=3)
    if cen.any():
        lab = None if obs.any() else label
        _hollow(ax, x[cen], budget[cen], color, s=size * 1.3, marker="^", linewidths=0.9, label=lab)
    return int(obs.sum()), int(cen.sum())


def _fit_label(row: pd.Series, prefix: str = "fit") -> str:
    """Legend text of a `fits` row: the exponent on line 1, its CI and censoring on line 2."""
    e, lo, hi = row["exponent"], row["ci_low"], row["ci_high"]
    if not np.isfinite(e):
        return f"{prefix}: unavailable"
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


def _fit_line(
    ax: Axes, row: pd.Series | None, xs: Iterable[float], *, color="0.2", prefix: str = "fit"
) -> bool:
    """Draw prefactor * x**exponent from a `fits` row over the range of `xs` (log axes)."""
    if row is None:
        return False
    xs = np.asarray([v for v in xs if np.isfinite(v) and v > 0], dtype=float)
    e, c = row["exponent"], row["prefactor"]
    label = _fit_label(row, prefix)
    if xs.size == 0 or not (np.isfinite(e) and np.isfinite(c) and c > 0):
        ax.plot([], [], ls="--", color=color, label=label)
        return False
    lo, hi = xs.min(), xs.max()
    if lo == hi:
        lo, hi = lo / 1.5, hi * 1.5
    grid = np.geomspace(lo, hi, 64)
    ax.plot(grid, c * grid**e, ls="--", lw=0.9, color=color, label=label, zorder=2)
    return True


def _tau_budget_arrays(
    df: pd.DataFrame, x: str, tau: str = "tau", censored: str = "censored"
) -> tuple[np.ndarray, ...]:
    """`_tau_points`' arrays: x, a tau column (the candidate tau, or another crossing with
    its own censoring column), the budget (`steps`), censored and diverged."""
    floats = [df[c].to_numpy(float) for c in (x, tau, "steps")]
    return (*floats, *(df[c].to_numpy(bool) for c in (censored, "diverged")))


def _normalised_loss(m: pd.DataFrame, k: float) -> np.ndarray:
    """Candidate loss in units of log K (display only: the plateau sits at 1)."""
    if not (np.isfinite(k) and k > 1):
        return np.full(len(m), np.nan)
    return m["candidate_loss"].to_numpy(float) / math.log(k)


def _value_at(steps: np.ndarray, values: np.ndarray, at: float) -> float:
    ok = _finite(steps, values)
    if not ok.any() or not np.isfinite(at):
        return math.nan
    return float(np.interp(at, steps[ok], values[ok]))


def _run_curves(
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
        ok = _finite(steps, y)
        if ok.any():
            last = np.flatnonzero(ok)[-1]
            ax_loss.plot([steps[last]], [y[last]], ls="none", label=DIVERGED_LABEL,
                         **DIVERGED_STYLE)  # fmt: skip
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
    if ax_dz is not None:
        ax_dz.plot([b], [_value_at(steps, m["delta_z"].to_numpy(float), b)], **kw)
    return True


def _censored_runs_entry(run_ids: Iterable[str]) -> list[Line2D]:
    """A legend entry naming censored runs that a step / tau axis cannot place."""
    ids = sorted({str(r) for r in run_ids})
    if not ids:
        return []
    shown = ", ".join(ids[:4]) + (f" (+{len(ids) - 4})" if len(ids) > 4 else "")
    label = f"{CENSORED_LABEL}, not shown: {shown}"
    return [Line2D([], [], marker="^", ls="none", mfc="none", mec="0.3", ms=5, label=label)]


def _tau_marker_handle() -> Line2D:
    return Line2D([], [], marker="o", ls="none", color="0.3", mec="white", label="tau")


def _tau_axes(ax: Axes, xlabel: str) -> None:
    """Log-log axes of tau (steps) against `xlabel`."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tau (steps)")


def _threshold_lines(ax: Axes, thresholds: Iterable[float]) -> None:
    ax.axhline(1.0, color="0.4", ls=":", lw=0.8, label="log K (plateau)")
    for thr in sorted({float(t) for t in thresholds if np.isfinite(t)}):
        ax.axhline(thr, color="0.4", ls="--", lw=0.8, label=f"threshold {thr:g} log K")

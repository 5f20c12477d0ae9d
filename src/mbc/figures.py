"""Paper figures from tidy tables (docs/method.md#experiments).

Every figure reads pandas DataFrames only and draws them; nothing here computes science.
Fitted lines come from the `fits` table (never fitted here), taus and onsets from the `tau`
table, and no figure states a verdict. The only arithmetic is for display: normalising a loss
by log K, scaling steps to examples seen, and averaging a heatmap cell over runs.

Robustness contract (each figure):

- an empty table or a missing experiment draws a "no data" panel instead of failing;
- a censored run (tau missing) is drawn explicitly as a hollow upward triangle at its step
  budget, with the legend entry ``censored (tau > budget)``;
- NaN values are skipped (and log axes skip non-positive values).

`FIGURES` maps a figure name to its function ``fig_<name>(tables, out_pdf, out_png)``;
`TABLES_NEEDED` says which tables each one reads (the Snakemake rule declares them as inputs);
`render` reads the CSVs and draws one figure. PDF and PNG (150 dpi) are written atomically.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import Normalize, TwoSlopeNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from mbc.io import read_csv_checked, write_bytes_atomic  # noqa: E402
from mbc.spec import REVERSE_DIRECTIONS  # noqa: E402

__all__ = ["CENSORED_LABEL", "DPI", "FIGURES", "STYLE", "TABLES_NEEDED", "render"]

STYLE = Path(__file__).with_name("mbc.mplstyle")
DPI = 150
CENSORED_LABEL = "censored (tau > budget)"
ONE_COL = 3.4  # inches: one-column figure width
TWO_COL = 7.0  # inches: figures with two or three side-by-side panels

FigureFn = Callable[[Mapping[str, pd.DataFrame], Path, Path], None]
FIGURES: dict[str, FigureFn] = {}
TABLES_NEEDED: dict[str, list[str]] = {}

_TAU_NUMERIC = (
    "init_std", "init_scale", "k", "n_groups", "d", "lr", "batch_size", "z_length",
    "n_supergroups", "sharing_factor", "label_noise", "seed", "threshold", "tau", "plateau_height", "height_over_log_k",
    "final_candidate_loss", "final_candidate_accuracy", "steps", "loss_onset",
    "delta_z_onset", "lead", "lead_fraction",
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
    """Turn a drawing function ``draw(tables) -> Figure`` into ``fig_<name>`` and register it."""
    needs = list(needs)

    def deco(draw: Callable[[dict[str, pd.DataFrame]], Figure]) -> FigureFn:
        def fig_fn(tables: Mapping[str, pd.DataFrame], out_pdf: Path, out_png: Path) -> None:
            full = {t: tables.get(t, pd.DataFrame()) for t in needs}
            full = {t: (pd.DataFrame() if df is None else df) for t, df in full.items()}
            before = set(plt.get_fignums())
            try:
                with plt.style.context(STYLE):
                    fig = draw(full)
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


def render(
    name: str,
    table_paths: Mapping[str, str | Path],
    out_pdf: str | Path,
    out_png: str | Path,
) -> None:
    """Read the CSV tables figure `name` needs and draw it to `out_pdf` and `out_png`."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    missing = [t for t in TABLES_NEEDED[name] if t not in table_paths]
    if missing:
        raise KeyError(f"figure {name!r} needs tables {missing} (got {sorted(table_paths)})")
    tables = {t: read_csv_checked(table_paths[t]) for t in TABLES_NEEDED[name]}
    FIGURES[name](tables, Path(out_pdf), Path(out_png))


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
    df["censored"] = flag | df["tau"].isna()
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
    *,
    color,
    marker: str = "o",
    label: str | None = None,
    positive: bool = True,
    size: float = 16,
) -> tuple[int, int]:
    """Observed taus as filled markers, censored runs as hollow triangles at their budget.

    Returns (number observed drawn, number censored drawn).
    """
    x, tau, budget = (np.asarray(a, dtype=float) for a in (x, tau, budget))
    censored = np.asarray(censored, dtype=bool)
    obs = ~censored & _finite(x, tau)
    cen = censored & _finite(x, budget)
    if positive:
        obs &= (x > 0) & (tau > 0)
        cen &= (x > 0) & (budget > 0)
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


def _tau_budget_arrays(df: pd.DataFrame, x: str) -> tuple[np.ndarray, ...]:
    return (
        df[x].to_numpy(float),
        df["tau"].to_numpy(float),
        df["steps"].to_numpy(float),
        df["censored"].to_numpy(bool),
    )


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

    Returns whether the run is censored and was marked as such.
    """
    m = m[m["step"] > 0].sort_values("step")  # log x axis
    steps = m["step"].to_numpy(float)
    y = _normalised_loss(m, row["k"])
    ax_loss.plot(steps, y, ls=ls, color=color, label=label)
    if ax_dz is not None:
        ax_dz.plot(steps, m["delta_z"].to_numpy(float), ls=ls, color=color, label=label)
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


# --------------------------------------------------------------------------- figures


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
    ax.legend(
        [*handles, _tau_marker_handle(), *([_censored_handle()] if any_cens else [])],
        [h.get_label() for h in handles] + ["tau"] + ([CENSORED_LABEL] if any_cens else []),
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
        _fit_line(a, _fit_row(fits, "tau_vs_lr"), e6["lr"])
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
        x, t, budget, cen = _tau_budget_arrays(g, "batch_size")
        _, nc = _tau_points(b, x, t, budget, cen, color=col, label=f"K={_fmt(k)}")
        cens["b"] |= nc > 0
        # Display only: examples seen = steps x batch size (tau and budget alike).
        _, nc = _tau_points(c, x, t * x, budget * x, cen, color=col, label=f"K={_fmt(k)}")
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


def _tau_fraction(df: pd.DataFrame) -> np.ndarray:
    """x = step / tau: the table's tau_fraction where given, else step / tau (NaN if censored)."""
    tf = df["tau_fraction"].to_numpy(float)
    alt = df["step"].to_numpy(float) / df["tau"].to_numpy(float)
    return np.where(np.isfinite(tf), tf, alt)


def _along_training(df: pd.DataFrame, values: Iterable[str]) -> pd.DataFrame:
    """Rows of runs along training: k, tau, step, tau_fraction and `values` numeric, run_id
    as text, and (when there are rows) x = step / tau."""
    df = _numeric(df, ("k", "tau", "step", "tau_fraction", *values))
    df["run_id"] = _text_col(df, "run_id")
    if not df.empty:
        df["x"] = _tau_fraction(df)
    return df


def _runs_by_k(df: pd.DataFrame) -> Iterator[tuple[pd.DataFrame, float, tuple | str]]:
    """Each run with a tau, in order of K: its rows sorted by x, its K and its K colour."""
    kcol = _colors(df["k"])
    runs = df[np.isfinite(df["x"])].groupby("run_id")
    for _, g in sorted(runs, key=lambda kv: kv[1]["k"].min()):
        g = g.sort_values("x")
        k = float(g["k"].iloc[0])
        yield g, k, kcol.get(k, "0.5")


@_register("collective", ["collective", "collective_summary"])
def fig_collective(tables: dict[str, pd.DataFrame]) -> Figure:
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
        _no_data(a, "empty collective_summary")
    else:
        seen_k: set[float] = set()
        for g, k, col in _runs_by_k(s):
            lab = None if k in seen_k else f"K={_fmt(k)}"
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
        style += _censored_runs_entry(s.loc[~np.isfinite(s["x"]), "run_id"])
        _legend(a, extra=style, loc="upper left")
        if not np.isfinite(s["x"]).any():
            _no_data(a, "no run with a tau")

    c = _along_training(tables["collective"], ("accuracy",))
    kcol = _colors(c["k"]) if not c.empty else {}
    bins = np.linspace(0.0, 1.0, 21)
    for i, f in enumerate(fractions):
        ax = axes[f"h{i}"]
        ax.set_title(f"({'bcde'[i]}) at {f:g} tau", loc="left")
        rows = c[np.isclose(c["x"], f, atol=1e-6)] if not c.empty else c
        rows = rows[np.isfinite(rows["accuracy"])] if not rows.empty else rows
        if rows.empty:
            _no_data(ax, "no groups")
            continue
        for k, g in rows.groupby("k"):
            ax.hist(
                g["accuracy"].clip(0, 1),
                bins=bins,
                histtype="stepfilled",
                alpha=0.45,
                color=kcol.get(float(k), "0.5"),
                edgecolor=kcol.get(float(k), "0.5"),
                label=f"K={_fmt(k)}",
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
    ax.set_xticks(range(grid.shape[1]), [_fmt(h) for h in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [_fmt(v) for v in grid.index])
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


@_register("routing", ["routing_attention", "routing_ablation", "tau"])
def fig_routing(tables: dict[str, pd.DataFrame]) -> Figure:
    """Selector routing (E9): attention to z and zero-ablation effect per head at tau; lead of
    the delta_z onset over the loss onset per run."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(TWO_COL, 2.5))
    a.set_title("(a) attention to z, mid", loc="left")
    b.set_title("(b) zero-ablation $\\Delta$loss, mid", loc="left")
    c.set_title("(c) onsets (E1)", loc="left")
    cols = ("k", "tau", "step", "layer", "head")
    att = _numeric(tables["routing_attention"], (*cols, "attn_to_z"))
    att = att[_text_col(att, "phase") == "mid"].dropna(subset=["layer", "head"])
    if att.empty or not att["attn_to_z"].notna().any():
        _no_data(a, "no mid-phase attention")
    else:
        _heatmap(a, att, "attn_to_z", signed=False, label="attention to z")
        n_runs = att["run_id"].nunique() if "run_id" in att.columns else 0
        a.set_title(f"(a) attention to z, mid (mean of {n_runs} runs)", loc="left")
    abl = _numeric(tables["routing_ablation"], (*cols, "delta_loss", "delta_delta_z"))
    keep = (_text_col(abl, "phase") == "mid") & (_text_col(abl, "kind") == "zero")
    abl = abl[keep].dropna(subset=["layer", "head"])
    if abl.empty or not abl["delta_loss"].notna().any():
        _no_data(b, "no mid-phase zero ablation")
    else:
        _heatmap(b, abl, "delta_loss", signed=True, label="$\\Delta$ loss (nats)")

    tau = _tau_rows(tables["tau"], ["E1"]).drop_duplicates("run_id")
    if tau.empty:
        _no_data(c, "no E1 runs")
        return fig
    lo, dz, budget = (tau[col].to_numpy(float) for col in ("loss_onset", "delta_z_onset", "steps"))
    both = _finite(lo, dz)
    # A run whose onset never came is drawn at its budget on that axis (hollow triangle).
    part = ~both & np.isfinite(budget)
    x_part = np.where(np.isfinite(lo), lo, budget)
    y_part = np.where(np.isfinite(dz), dz, budget)
    if not (both.any() or part.any()):
        _no_data(c, "no onsets")
        return fig
    kcol = _colors(tau["k"])
    for k in sorted(kcol):
        sel = tau["k"].to_numpy(float) == k
        col = kcol[k]
        c.scatter(lo[sel & both], dz[sel & both], s=14, color=col, label=f"K={_fmt(k)}", zorder=3)
        if (sel & part).any():
            _hollow(c, x_part[sel & part], y_part[sel & part], col, s=18, marker="^")
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
    _legend(c, extra=extra, loc="upper left", fontsize=6.5)
    return fig


@_register("hessian", ["hessian", "fits"])
def fig_hessian(tables: dict[str, pd.DataFrame]) -> Figure:
    """Hessian extremes along training (E10); anisotropy vs K at the plateau phase."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.2))
    a.set_title(r"(a) $\lambda_\max$ and $|\lambda_\min|$ along training", loc="left")
    b.set_title("(b) anisotropy on the plateau", loc="left")
    h = _along_training(
        tables["hessian"],
        ("lambda_max", "lambda_min", "residual_max", "residual_min", "anisotropy",
         "anisotropy_power"),
    )  # fmt: skip
    for col in ("converged_max", "converged_min"):
        h[col] = _as_bool(h[col]) if col in h.columns else False
    if h.empty:
        _no_data(a, "empty hessian table")
        _no_data(b, "empty hessian table")
        return fig
    h["abs_min"] = h["lambda_min"].abs()
    seen: set[float] = set()
    any_hollow = False
    for g, k, col in _runs_by_k(h):
        for ycol, rcol, ccol, ls, mk in (
            ("lambda_max", "residual_max", "converged_max", "-", "o"),
            ("abs_min", "residual_min", "converged_min", "--", "s"),
        ):
            ok = _finite(g["x"], g[ycol]) & (g[ycol].to_numpy(float) > 0)
            gg = g[ok]
            if gg.empty:
                continue
            lab = f"K={_fmt(k)}" if (ycol == "lambda_max" and k not in seen) else None
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
            _hollow(a, gg["x"][~conv], y[~conv], col, marker=mk, s=12)
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
        extra += _censored_runs_entry(h.loc[~np.isfinite(h["x"]), "run_id"])
        _legend(a, extra=extra, below=True, ncol=3, columnspacing=1.0)
    else:
        _no_data(a, "no positive eigenvalue estimates")

    p = h[_text_col(h, "phase") == "plateau"]
    p = p[_finite(p["k"], p["anisotropy"]) & (p["k"] > 0) & (p["anisotropy"] > 0)]
    if p.empty:
        _no_data(b, "no plateau-phase estimates")
        return fig
    conv = (p["converged_max"] & p["converged_min"]).to_numpy(bool)
    b.scatter(
        p["k"][conv], p["anisotropy"][conv], s=16, color="C0", label="both converged", zorder=3
    )
    if (~conv).any():
        _hollow(b, p["k"][~conv], p["anisotropy"][~conv], "C0", s=16, label="not converged")
    _fit_line(b, _fit_row(tables["fits"], "anisotropy_vs_k"), p["k"])
    # the author's estimator on the same checkpoints: power iteration
    pw = p[_finite(p["anisotropy_power"]) & (p["anisotropy_power"] > 0)]
    if not pw.empty:
        b.scatter(pw["k"], pw["anisotropy_power"], s=16, marker="^", color="C1",
                  label="power iteration (author's)", zorder=3)  # fmt: skip
        _fit_line(
            b,
            _fit_row(tables["fits"], "anisotropy_power_vs_k"),
            pw["k"],
            color="C1",
            prefix="power fit",
        )
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("K")
    b.set_ylabel(r"$|\lambda_\max / \lambda_\min|$")
    _legend(b, below=True, ncol=2)
    return fig


@_register("appendix_linear", ["metrics", "tau"])
def fig_appendix_linear(tables: dict[str, pd.DataFrame]) -> Figure:
    """E13: L_cand / log K of the linear network vs the matching transformer runs (same K, D)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 2.6))
    all_tau = _tau_rows(tables["tau"])
    m = _metrics_rows(tables["metrics"])
    lin = all_tau[all_tau["experiment"] == "E13"]
    if (lin["model"] != "").any():
        lin = lin[lin["model"] == "linear"]
    lin = _one_seed_per(lin[lin["run_id"].isin(set(m["run_id"]))], "k")
    if lin.empty:
        _no_data(ax, "no E13 runs with metrics")
        return fig
    trans = all_tau[(all_tau["model"] == "transformer") & all_tau["run_id"].isin(set(m["run_id"]))]
    # Prefer the E1 run with the same K and D, else any transformer run with that K and D.
    trans = trans.assign(_pref=(trans["experiment"] != "E1").astype(int))
    kcol = _colors(lin["k"])
    any_cens, n_matched = False, 0
    for _, row in lin.iterrows():
        col = kcol.get(float(row["k"]), "0.5")
        any_cens |= _run_curves(ax, None, m[m["run_id"] == row["run_id"]], row, color=col, ls="--")
        same = trans[(trans["k"] == row["k"]) & ((trans["d"] == row["d"]) | trans["d"].isna())]
        same = same.sort_values(["_pref", "seed", "run_id"])
        if same.empty:
            continue
        t = same.iloc[0]
        n_matched += 1
        any_cens |= _run_curves(ax, None, m[m["run_id"] == t["run_id"]], t, color=col)
        ax.plot([], [], color=col, label=f"K={_fmt(row['k'])}")
    if n_matched == 0:
        for k, col in kcol.items():
            ax.plot([], [], color=col, label=f"K={_fmt(k)}")
        _note(ax, "no matching transformer runs", "lower left")
    _threshold_lines(ax, lin["threshold"])
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(r"$L_\mathrm{cand}$ / log K")
    extra = [
        Line2D([], [], color="0.3", ls="--", label="linear (E13)"),
        Line2D([], [], color="0.3", ls="-", label="transformer"),
        _tau_marker_handle(),
    ]
    _legend(ax, censored=any_cens, extra=extra, loc="lower left", fontsize=6.5, ncol=2)
    return fig


def _one_experiment(
    tables: dict[str, pd.DataFrame], experiment: str
) -> tuple[Figure, Axes, pd.DataFrame]:
    """A one-column figure and `experiment`'s tau rows ("no data" drawn when it has none)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 2.6))
    rows = _tau_rows(tables["tau"], [experiment])
    if rows.empty:
        _no_data(ax, f"no {experiment} runs")
    return fig, ax, rows


@_register("appendix_direction", ["tau"])
def fig_appendix_direction(tables: dict[str, pd.DataFrame]) -> Figure:
    """E14: tau of (B,z)->A vs A->B per K; bars = mean over uncensored seeds, seeds as points."""
    fig, ax, e14 = _one_experiment(tables, "E14")
    if e14.empty:
        return fig
    ks = sorted(v for v in e14["k"].unique() if np.isfinite(v))
    reverse = next((d for d in REVERSE_DIRECTIONS if (e14["task"] == d).any()), "az_to_b")
    rev_label = "(A,z)\u2192B" if reverse == "az_to_b" else "A\u2192B"
    tasks = (("bz_to_a", "(B,z)\u2192A", "C0", -0.2), (reverse, rev_label, "C1", 0.2))
    any_cens = False
    rng = np.random.default_rng(0)  # fixed jitter: reproducible figure bytes
    for task, label, col, off in tasks:
        g = e14[e14["task"] == task]
        heights = []
        for i, k in enumerate(ks):
            gk = g[g["k"] == k]
            obs = gk.loc[~gk["censored"], "tau"].dropna()
            heights.append(obs.mean() if len(obs) else np.nan)
            x = np.full(len(gk), i + off) + rng.uniform(-0.05, 0.05, len(gk))
            _, nc = _tau_points(
                ax,
                x,
                gk["tau"],
                gk["steps"],
                gk["censored"].to_numpy(bool),
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
            label=label,
            zorder=1,
        )
    ax.set_xticks(range(len(ks)), [f"K={_fmt(k)}" for k in ks])
    ax.set_ylabel("tau (steps)")
    extra = [
        Line2D([], [], marker="o", ls="none", color="0.15", ms=3, label="seeds"),
        Line2D([], [], ls="none", label="bars: mean over uncensored seeds"),
    ]
    _legend(ax, censored=any_cens, extra=extra, loc="upper left")
    missing = [lab for t, lab, _, _ in tasks if not (e14["task"] == t).any()]
    if missing:
        _note(ax, "missing: " + ", ".join(missing), "upper right")
    return fig


@_register("appendix_label_noise", ["tau"])
def fig_appendix_label_noise(tables: dict[str, pd.DataFrame]) -> Figure:
    """E12: tau vs label-noise probability, and the final candidate accuracy."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 2.5))
    a.set_title("(a) waiting time", loc="left")
    b.set_title("(b) final candidate accuracy", loc="left")
    e12 = _tau_rows(tables["tau"], ["E12"])
    if e12.empty:
        _no_data(a, "no E12 runs")
        _no_data(b, "no E12 runs")
        return fig
    _, nc = _tau_points(
        a, *_tau_budget_arrays(e12, "label_noise"), color="C0", label="E12 runs", positive=False
    )
    ps = sorted(v for v in e12["label_noise"].unique() if np.isfinite(v))
    for axis in (a, b):
        axis.set_xticks(ps, [f"{v:g}" for v in ps])
    a.set_xlabel("label noise p")
    a.set_ylabel("tau (steps)")
    _legend(a, censored=nc > 0, loc="upper left")
    ok = _finite(e12["label_noise"], e12["final_candidate_accuracy"])
    if not ok.any():
        _no_data(b, "no final accuracy")
        return fig
    cen = e12["censored"].to_numpy(bool)
    x, y = e12["label_noise"].to_numpy(float), e12["final_candidate_accuracy"].to_numpy(float)
    b.scatter(x[ok & ~cen], y[ok & ~cen], s=16, color="C2", label="crossed threshold", zorder=3)
    if (ok & cen).any():
        _hollow(b, x[ok & cen], y[ok & cen], "C2", s=20, marker="^", label=CENSORED_LABEL)
    b.set_xlabel("label noise p")
    b.set_ylabel("final candidate accuracy")
    b.set_ylim(-0.03, 1.03)
    b.legend(loc="lower left")
    return fig


@_register("appendix_sharing", ["tau", "fits"])
def fig_appendix_sharing(tables: dict[str, pd.DataFrame]) -> Figure:
    """E11: tau vs sharing factor n_groups / G (log-log), fitted line from `fits`."""
    fig, ax, e11 = _one_experiment(tables, "E11")
    if e11.empty:
        return fig
    any_cens = False
    for i, (kind, g) in enumerate(e11.groupby("sharing", sort=True)):
        _, nc = _tau_points(
            ax, *_tau_budget_arrays(g, "sharing_factor"), color=f"C{i % 8}", label=kind or "runs"
        )
        any_cens |= nc > 0
    _fit_line(ax, _fit_row(tables["fits"], "tau_vs_sharing"), e11["sharing_factor"])
    _tau_axes(ax, "sharing factor (groups per selector set)")
    _legend(ax, censored=any_cens, loc="best", fontsize=6.5)
    return fig


@_register("init_scale", ["tau", "fits"])
def fig_init_scale(tables: dict[str, pd.DataFrame]) -> Figure:
    """E15: (a) tau vs init std with the fit tau_vs_init_std; (b) tau vs D under the
    default init (E1 + E2) and the alternative (E15_E1 + E15_E2), each with its fit."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(TWO_COL, 3.0))
    fits = tables["fits"]
    sweep = _tau_rows(tables["tau"], ["E15"])
    any_cens = False
    if sweep.empty:
        _no_data(a, "no E15 runs")
    else:
        _, nc = _tau_points(a, *_tau_budget_arrays(sweep, "init_std"), color="C2", label="E15 runs")
        any_cens |= nc > 0
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
        _, nc = _tau_points(
            b, *_tau_budget_arrays(df, "d"), color=color, marker=marker, label=f"{label} ({scheme})"
        )
        any_cens |= nc > 0
        _fit_line(b, _fit_row(fits, fit), df["d"], color=color, prefix=label)
        drawn = True
    if not drawn:
        _no_data(b, "no E1/E2 or E15_E1/E15_E2 runs")
    else:
        _tau_panel(b, "dataset size D (examples)", "(b) tau vs D under both inits", any_cens)
    return fig


def _tau_panel(ax: Axes, xlabel: str, title: str, censored: bool) -> None:
    """Log-log axes of tau (steps) against `xlabel`, titled, legend below."""
    _tau_axes(ax, xlabel)
    ax.set_title(title, fontsize=8)
    _legend(ax, censored=censored, below=True)


@_register("appendix_threshold", ["threshold_sensitivity"])
def fig_appendix_threshold(tables: dict[str, pd.DataFrame]) -> Figure:
    """E4: exponent of tau vs D (with CI) as a function of the threshold (fraction of log K)."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 2.5))
    t = _numeric(tables["threshold_sensitivity"], ("threshold", *_FIT_NUMERIC))
    t = t[np.isfinite(t["threshold"])].sort_values("threshold")
    if t.empty:
        _no_data(ax, "empty threshold_sensitivity")
        return fig
    x, e = t["threshold"].to_numpy(float), t["exponent"].to_numpy(float)
    lo, hi = t["ci_low"].to_numpy(float), t["ci_high"].to_numpy(float)
    ok = np.isfinite(e)
    ci = ok & _finite(lo, hi)
    if ci.any():
        ax.errorbar(
            x[ci],
            e[ci],
            yerr=[np.maximum(e[ci] - lo[ci], 0), np.maximum(hi[ci] - e[ci], 0)],
            fmt="o",
            color="C0",
            ms=4,
            label="exponent, CI",
        )
    if (ok & ~ci).any():
        ax.plot(x[ok & ~ci], e[ok & ~ci], "o", mfc="none", color="C0", label="exponent (no CI)")
    if ok.any():
        ax.plot(x[ok], e[ok], "-", color="C0", lw=0.6, alpha=0.6)
    else:
        _no_data(ax, "no fit succeeded")
        return fig
    top = np.where(ci, hi, e)
    for xi, yi, nc in zip(x[ok], top[ok], t["n_censored"].to_numpy(float)[ok], strict=True):
        if np.isfinite(nc) and nc > 0:
            ax.annotate(
                f"{int(nc)} censored", (xi, yi), textcoords="offset points", xytext=(0, 3),
                ha="center", va="bottom", fontsize=6.5, color="0.35",
            )  # fmt: skip
    for xi in x[~ok]:  # a threshold whose fit failed: shown, not dropped
        ax.axvline(xi, color="0.8", lw=0.6)
        ax.annotate(
            "fit n/a", (xi, np.nanmean(e[ok])), ha="center", va="center", rotation=90,
            fontsize=6.5, color="0.35", backgroundcolor="white",
        )  # fmt: skip
    ax.margins(x=0.1, y=0.12)
    ax.set_xlabel("threshold (fraction of log K)")
    ax.set_ylabel("exponent of tau vs D")
    ax.set_xticks(x, [f"{v:g}" for v in x])
    _legend(ax, loc="best")
    return fig


@_register("appendix_plateau", ["plateau_sensitivity"])
def fig_appendix_plateau(tables: dict[str, pd.DataFrame]) -> Figure:
    """Plateau height / log K of each E1/E2 run under each window end, with the band."""
    fig, ax = plt.subplots(figsize=(ONE_COL, 2.6))
    t = _numeric(tables["plateau_sensitivity"], ("k", "height_over_log_k", "band_low",
                                                  "band_high"))  # fmt: skip
    if t.empty:
        _no_data(ax, "empty plateau_sensitivity")
        return fig
    t["primary"] = _as_bool(t["primary"]) if "primary" in t else False
    ends = list(dict.fromkeys(_text_col(t, "window_end")))  # table order: thresholds, loss onset
    lo, hi = t["band_low"].iloc[0], t["band_high"].iloc[0]
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axhspan(lo, hi, color="0.92", zorder=0, label=f"band {lo:g}-{hi:g}")
    ax.axhline(1.0, color="0.5", lw=0.6, ls="--", zorder=1)
    colors = _colors(sorted(t["k"].dropna().unique()))
    rng = np.random.default_rng(0)  # fixed jitter: the figure is reproducible
    for i, end in enumerate(ends):
        g = t[_text_col(t, "window_end") == end]
        for k, gk in g.groupby("k"):
            y = gk["height_over_log_k"].to_numpy(float)
            x = i + rng.uniform(-0.18, 0.18, y.size)
            ax.scatter(x, y, s=9, color=colors[k], label=f"K={k:g}" if i == 0 else None,
                       zorder=3)  # fmt: skip
        y = g["height_over_log_k"].to_numpy(float)
        ok = np.isfinite(y)
        n_in = int(((y >= lo) & (y <= hi))[ok].sum())
        ax.annotate(f"{n_in}/{ok.sum()}", (i, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=6.5, color="0.35")  # fmt: skip
    primary = set(_text_col(t[t["primary"]], "window_end"))
    labels = [f"{e}\n(used)" if e in primary else e for e in ends]
    ax.set_xticks(range(len(ends)), [lab.replace("delta_z > ", "dz>") for lab in labels],
                  fontsize=6.5)  # fmt: skip
    ax.set_xlim(-0.6, len(ends) - 0.4)
    ax.set_xlabel("plateau window ends at (dz: z-shuffle gap)")
    ax.set_ylabel("plateau height / log K")
    _note(ax, "above: runs in band / runs", loc="lower left")
    _legend(ax, loc="upper left", fontsize=6.5)
    return fig

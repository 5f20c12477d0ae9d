"""The figures' registry: each figure function registered by name with the tables it reads
(`FIGURES`, `TABLES_NEEDED`: `mbc.paper.figure_tables`' declaration), `render`, and
the style and atomic saving every figure goes through. A figure function returns what it
drew (`mbc.paper.figures.drawn.Drawn`); `render` writes the caption assembled from it."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mbc.core.artifacts import (
    built_from,
    read_csv_checked,
    seal,
    write_bytes_atomic,
    write_text_table,
)
from mbc.paper.config_sections import FigureEntry
from mbc.paper.figure_tables import FIGURE_TABLES
from mbc.paper.figures.captions import CAPTIONS, caption_tex
from mbc.paper.figures.common import DPI, STYLE
from mbc.paper.figures.drawing import no_data, tidy_log_axes
from mbc.paper.figures.drawn import Drawn, record

FigureFn = Callable[[Mapping[str, pd.DataFrame], Path, Path, FigureEntry], Drawn]
FIGURES: dict[str, FigureFn] = {}
TABLES_NEEDED: dict[str, list[str]] = {}


def paper_figure(name: str) -> Callable:
    """The extension point: turn a drawing function ``draw(tables, entry) -> Figure`` into
    figure `name`. The tables it is given are those `mbc.paper.figure_tables` declares for
    it (what the figure rule gives it, declared there once); `entry` is its config `figures`
    entry (its experiments and fits, by role); its caption is `captions.CAPTIONS[name]`."""
    if name not in FIGURE_TABLES or name not in CAPTIONS:
        raise RuntimeError(
            f"figure {name!r} needs its tables in mbc.paper.figure_tables and its caption in "
            "mbc.paper.figures.captions"
        )
    needs = list(FIGURE_TABLES[name])

    def deco(draw: Callable[[dict[str, pd.DataFrame], FigureEntry], Figure]) -> FigureFn:
        def fig_fn(
            tables: Mapping[str, pd.DataFrame], out_pdf: Path, out_png: Path, entry: FigureEntry
        ) -> Drawn:
            if entry.name != name:
                raise ValueError(f"figure {name!r} given the config entry of {entry.name!r}")
            full = {t: pd.DataFrame() if tables.get(t) is None else tables[t] for t in needs}
            before = set(plt.get_fignums())
            try:
                with plt.style.context(STYLE):
                    fig = draw(full, entry)
                    _unlog_empty_axes(fig)
                    tidy_log_axes(fig)
                    _save(fig, Path(out_pdf), Path(out_png))
                    return record(fig)
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
        seal(path)  # its sidecar: bytes, tables read (`render`'s block) and config


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
                    no_data(ax, "nothing > 0 to place on its log axis")


def render(
    name: str,
    table_paths: Mapping[str, str | Path],
    out_pdf: str | Path,
    out_png: str | Path,
    entry: FigureEntry,
    out_caption: str | Path | None = None,
) -> Drawn:
    """Draw figure `name` from the CSV tables it needs, as its config `figures` entry says,
    and write its caption for what it drew to `out_caption` (the report's `\\caption`)."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    missing = [t for t in TABLES_NEEDED[name] if t not in table_paths]
    if missing:
        raise KeyError(f"figure {name!r} needs tables {missing} (got {sorted(table_paths)})")
    tables = {t: read_csv_checked(table_paths[t]) for t in TABLES_NEEDED[name]}
    with built_from([table_paths[t] for t in TABLES_NEEDED[name]]):
        drawn = FIGURES[name](tables, Path(out_pdf), Path(out_png), entry)
        if out_caption is not None:
            write_text_table(out_caption, caption_tex(name, drawn, entry))  # sealed, as a table
    return drawn

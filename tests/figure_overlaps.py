"""What a figure's legends and insets cover: the test of "no element over data"."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from mbc.paper import figures
from mbc.paper.config_sections import Figures
from mbc.paper.figures.drawing import data_points


def covered_points(fig: Figure) -> list[tuple[str, str, int]]:
    """(element, panel, points) for each legend or inset of `fig` that covers a marker of
    a panel other than itself (an inset's own points are its content), after layout."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [a for top in fig.axes for a in (top, *top.child_axes)]
    boxes = [
        (
            f"legend of {ax.get_title(loc='left') or 'a panel'}",
            leg.get_window_extent(renderer),
            None,
        )
        for ax in axes
        if (leg := ax.get_legend()) is not None
    ]
    boxes += [("inset", ins.get_tightbbox(renderer), ins) for ax in axes for ins in ax.child_axes]
    boxes += [("figure legend", leg.get_window_extent(renderer), None) for leg in fig.legends]
    out = []
    for ax in axes:
        # the markers inside the panel, in display coordinates (one clipped off is not drawn)
        pts = ax.transAxes.transform(data_points(ax))
        inside = ax.get_window_extent(renderer)
        pts = [(x, y) for x, y in pts if inside.contains(x, y)]
        for name, box, own in boxes:
            hit = sum(box.contains(x, y) for x, y in pts)
            if own is not ax and hit:
                out.append((name, ax.get_title(loc="left"), hit))
    return out


def render_covering(
    table_paths: Mapping[str, str], out: Path, entries: Figures
) -> dict[str, list[tuple[str, str, int]]]:
    """Render every figure from `table_paths` into `out`; what each one's legends and insets
    cover (`covered_points`), read off the figure as saved."""
    found: dict[str, list] = {}
    original = figures.registry._save

    def check(fig, out_pdf, out_png):
        original(fig, out_pdf, out_png)
        found[out_pdf.stem] = covered_points(fig)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures.registry, "_save", check)
        for name in figures.FIGURES:
            figures.render(
                name, table_paths, out / f"{name}.pdf", out / f"{name}.png", entries[name]
            )
    return found

"""Paper figures from tidy tables (docs/method.md#experiments).

Every figure reads pandas DataFrames only and draws them; nothing here computes science.
Fitted lines come from the `fits` table (never fitted here), taus and onsets from the `tau`
table, and no figure states a verdict. The only arithmetic is for display: normalising a loss
by log K, scaling steps to examples seen, and averaging a heatmap cell over runs.

Robustness contract (each figure):

- an empty table or a missing experiment draws a "no data" panel instead of failing;
- a censored run (tau missing) is drawn explicitly as a hollow upward triangle at its step
  budget, with the legend entry ``censored (tau > budget)``;
- NaN values are skipped (and log axes skip non-positive values);
- no legend or inset covers a data point (an inset takes the freest corner, `free_corner`);
- the caption says what was drawn, and what was asked for and could not be (`captions`).

`FIGURES` maps a figure name to its function ``fig_<name>(tables, out_pdf, out_png, entry)``;
`TABLES_NEEDED` says which tables each one reads: `mbc.paper.figure_tables`' declaration,
which the Snakefile reads (without matplotlib) to declare them as inputs;
`render` reads the CSVs and draws one figure. PDF and PNG (150 dpi) are written atomically.
`entry` is the figure's config `figures` entry (`mbc.paper.config_sections.FigureEntry`): which
experiments it draws in each of its roles and which `fits` rows its lines are; no figure
names an experiment or a fit itself.

Modules: `common` (registry, style, saving, table and drawing helpers), `main_text` (plateau
and waiting time, E15), `diagnostics` (E8-E10) and `appendix`.
"""

import matplotlib

matplotlib.use("Agg")  # before the modules below import pyplot

# Importing the figure modules registers their figures.
from mbc.paper.figure_tables import FIGURE_TABLES  # noqa: E402
from mbc.paper.figures import appendix, diagnostics, main_text  # noqa: E402, F401
from mbc.paper.figures.common import (
    CENSORED_LABEL,
    DPI,
    STYLE,
)
from mbc.paper.figures.registry import (
    FIGURES,
    TABLES_NEEDED,
    render,
)

__all__ = ["CENSORED_LABEL", "DPI", "FIGURES", "STYLE", "TABLES_NEEDED", "render"]

# FIGURES' order is mbc.paper.figure_tables' (Snakemake's and the report's): the paper's.
if list(FIGURES) != list(FIGURE_TABLES) and sorted(FIGURES) == sorted(FIGURE_TABLES):
    for _name in FIGURE_TABLES:
        FIGURES[_name] = FIGURES.pop(_name)
        TABLES_NEEDED[_name] = TABLES_NEEDED.pop(_name)
    del _name
if list(FIGURES) != list(FIGURE_TABLES):
    raise RuntimeError(
        f"mbc.paper.figures: registered {sorted(FIGURES)}, declared {sorted(FIGURE_TABLES)}"
    )

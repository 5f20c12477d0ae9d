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

Modules: `common` (registry, style, saving, table and drawing helpers), `main_text` (plateau
and waiting time, E15), `diagnostics` (E8-E10) and `appendix`.
"""

import matplotlib

matplotlib.use("Agg")  # before the modules below import pyplot

# Importing the figure modules registers their figures.
from mbc.paper.figures import appendix, diagnostics, main_text  # noqa: E402, F401
from mbc.paper.figures.common import (  # noqa: E402
    CENSORED_LABEL,
    DPI,
    FIGURES,
    STYLE,
    TABLES_NEEDED,
    render,
)

__all__ = ["CENSORED_LABEL", "DPI", "FIGURES", "STYLE", "TABLES_NEEDED", "render"]

# FIGURES' order is Snakemake's and the report's: the paper's, with E15 after E11 as before
# the modules were split (main_text registers init_scale ahead of the other modules).
_ORDER = (
    "loss_curves", "tau_vs_d", "noise", "collective", "routing", "hessian", "appendix_linear",
    "appendix_direction", "appendix_label_noise", "appendix_sharing", "init_scale",
    "appendix_threshold", "appendix_plateau",
)  # fmt: skip
if sorted(_ORDER) != sorted(FIGURES):
    raise RuntimeError(
        f"mbc.paper.figures: _ORDER {sorted(_ORDER)} != registered {sorted(FIGURES)}"
    )
for _name in _ORDER:
    FIGURES[_name] = FIGURES.pop(_name)
    TABLES_NEEDED[_name] = TABLES_NEEDED.pop(_name)
del _name

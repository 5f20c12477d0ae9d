"""The whole config's type: core's (`mbc.core.config_loader.CoreConfig`: the preset, the
outdir, the runs) with the sections that the layers above core own, each typed by its owner
and built from `raw` on first use (`mbc.config.load` builds them all, so a missing key stops
the workflow at start-up). The rules' params, `mbc.runs_pipeline`, `mbc.report_pipeline` and
`mbc.paper.figures` take these, not the config's dicts."""

from __future__ import annotations

import functools

from mbc.analysis.config_sections import (
    Bootstrap,
    Fits,
    Hypotheses,
    Robustness,
    Scorecard,
    Statistics,
)
from mbc.core.config_loader import CoreConfig
from mbc.core.frozen import content_id, thaw
from mbc.diagnostics.config_sections import Diagnostics, PlateauSensitivity
from mbc.paper.config_sections import Figures, Report


class Config(CoreConfig):
    """The config as the workflow and the commands load it (`mbc.config.load`)."""

    SECTIONS = (
        "bootstrap", "diagnostics", "fits", "statistics", "scorecard", "plateau_sensitivity",
        "robustness", "report", "hypotheses", "figures",
    )  # fmt: skip

    @functools.cached_property
    def bootstrap(self) -> Bootstrap:
        return Bootstrap.from_raw(self.raw["bootstrap"])

    @functools.cached_property
    def diagnostics(self) -> Diagnostics:
        return Diagnostics.from_raw(self.raw["diagnostics"])

    @functools.cached_property
    def fits(self) -> Fits:
        return Fits.from_raw(self.raw)

    @functools.cached_property
    def statistics(self) -> Statistics:
        return Statistics.from_raw(self.raw["statistics"])

    @functools.cached_property
    def scorecard(self) -> Scorecard:
        return Scorecard.from_raw(self.raw["scorecard"])

    @functools.cached_property
    def robustness(self) -> Robustness:
        return Robustness.from_raw(self.raw["robustness"])

    @functools.cached_property
    def hypotheses(self) -> Hypotheses:
        return Hypotheses.from_raw(self.raw["hypotheses"])

    @functools.cached_property
    def report(self) -> Report:
        return Report.from_raw(self.raw.get("report", {}), self.raw.get("labels", {}))

    @functools.cached_property
    def plateau_sensitivity(self) -> PlateauSensitivity:
        return PlateauSensitivity.from_raw(self.raw["plateau_sensitivity"])

    @functools.cached_property
    def figures(self) -> Figures:
        return Figures.from_raw(self.raw["figures"])

    @property
    def diverged(self) -> str:
        """config `diverged`: how every statistic, fit and table treats a diverged run."""
        return self.raw.get("diverged") or "exclude"

    def diagnosed_runs(self, diagnostic: str) -> list[str]:
        """Runs a post-hoc diagnostic (`diagnostics.<name>`) reads the snapshots of: its
        source experiment filtered by `where`, transformers on the main task only."""
        d = getattr(self.diagnostics, diagnostic)
        specs = self.specs
        return [
            r
            for r in self.run_ids(d.source, thaw(d.where) or None)
            if specs[r].model.kind == "transformer" and specs[r].task.direction == "bz_to_a"
        ]

    def config_ids(self) -> dict[str, str]:
        """rule -> its config id (`_config_ids`), computed once per config."""
        return dict(self._config_ids)

    @functools.cached_property
    def _config_ids(self) -> dict[str, str]:
        """rule -> the content id of the config sections (and parameters) the rule reads: its
        `config_id` param, which its script records in every table's sidecar
        (`mbc.core.artifacts.built_under`) and the run store in each entry; the start-up
        check compares them with this config's, whatever `.snakemake/` holds."""
        d = self.diagnostics
        return {
            "summarize_run": content_id(d.summary),
            "plateau_sensitivity": content_id(self.plateau_sensitivity, d.summary),
            "collective": content_id(d.collective),
            "routing": content_id(d.routing),
            "hessian": content_id(d.hessian),
            "fits": content_id(self.fits, self.bootstrap, self.diverged),
            "statistics": content_id(self.statistics, self.bootstrap, self.diverged),
            "hypotheses": content_id(self.hypotheses),
            "robustness": content_id(
                self.robustness, self.scorecard.ours, self.bootstrap, self.diverged
            ),
            "scorecard": content_id(self.scorecard),
            "tex": content_id(self.report, self.questions()),
        }

    def figure_config_id(self, figure: str) -> str:
        """The figure rule's config id: its `figures:` entry."""
        return content_id(self.figures[figure])

    def missing_section_key(self) -> tuple[str, str] | None:
        """(section, the key it lacks) for the first section that cannot be built, else None."""
        for section in self.SECTIONS:
            try:
                getattr(self, section)
            except KeyError as exc:
                return section, exc.args[0]
            except TypeError as exc:  # a typed entry built from an incomplete mapping
                return section, str(exc).split(": ", 1)[-1]
        return None

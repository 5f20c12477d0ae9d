"""The whole config, as the workflow and the commands load it: core's loader
(`mbc.core.config_loader`: presets, the schema, the runs, the references across sections)
with the parts that the layers above core own: their sections' types (`Config`,
`mbc.config.sections`), their schema parts (config `statistics`: the kinds of statistic,
`mbc.analysis.stat_schema`; `figures`: each figure's roles, `mbc.paper.figure_tables`) and
their checks (the Hessian estimators, `mbc.diagnostics.config_sections`; the Hessian rows
that fits and statistics read, `mbc.analysis.config_sections`; the figures' fit roles).
Imports no numpy, pandas or scipy: every Snakemake start-up pays for it.
`python -m mbc.config FILE ...` checks config files before a run (`mbc.config.__main__`)."""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

from mbc.analysis.config_sections import check_hessian_rows
from mbc.analysis.stat_schema import statistics_schema
from mbc.config.sections import Config
from mbc.core import config_loader as core
from mbc.core.arithmetic import Arithmetic
from mbc.core.config_loader import ConfigError, ConfigFileError, Run, deep_merge, read_yaml
from mbc.diagnostics.config_sections import check_hessian_methods
from mbc.paper.figure_tables import check_fit_roles, figures_schema

__all__ = [
    "Config",
    "ConfigError",
    "ConfigFileError",
    "Run",
    "check_files",
    "load",
    "command_line_targets",
    "preset_of_targets",
    "read_yaml",
    "schema",
]


@functools.cache
def schema() -> dict:
    """The whole config schema: core's, with `statistics` and `figures` shaped by their
    owners. Read once per process; not mutated."""
    full = copy.deepcopy(core.schema())
    full["properties"]["statistics"] = statistics_schema()  # the kinds own their parameters
    full["properties"]["figures"] = figures_schema()  # the figures own their roles
    return full


def load(
    raw: dict,
    overrides: dict | None = None,
    given_as: str | None = "--config",
    arithmetic: Arithmetic | None = None,
) -> Config:
    """Validate and expand the whole config (`mbc.core.config_loader.load`, with the whole
    schema, the layers' checks and their sections' types). Raises ConfigError, naming the
    key, before any job runs. arithmetic: what `auto` means (default: this machine's;
    `mbc.core.arithmetic`)."""
    loaded = core.load(
        raw,
        overrides,
        given_as,
        schema_fn=schema,
        checks=(check_hessian_methods, check_hessian_rows, check_fit_roles),
        arithmetic=arithmetic,
        config_class=Config,
    )
    assert isinstance(loaded, Config)
    return loaded


def check_files(paths: list[str], base: str | Path = "config.yaml") -> Config:
    """What `snakemake --configfile P1 P2 ...` would start with: the files merged in order
    over `base`, then validated like the workflow does at start-up."""
    over: dict = {}
    for path in paths:
        over = deep_merge(over, read_yaml(path))
    return load(deep_merge(read_yaml(base), over), over, given_as=None)


def preset_of_targets(raw: dict, overrides: dict | None, targets) -> str | None:
    """The preset whose outdir holds every file named on the command line, when the command
    names no preset and no outdir: `snakemake results/smoke/figures/noise.pdf` builds that
    figure with the smoke preset (the deepest outdir holding it wins; rule names such as
    `all` are not files). None: the config's own preset decides."""
    if {"preset", "outdir"} & set(overrides or {}):
        return None
    files = [os.path.normpath(str(t)) for t in targets or () if "/" in str(t) or "." in str(t)]
    outdirs = {"paper": raw.get("outdir", "results")} | {
        name: p["outdir"] for name, p in (raw.get("presets") or {}).items() if p.get("outdir")
    }

    def owner(path: str) -> str | None:
        holding = [
            (len(os.path.normpath(o)), name)
            for name, o in outdirs.items()
            if path.startswith(os.path.normpath(str(o)) + os.sep)
        ]
        return max(holding)[1] if holding else None

    owners = {owner(f) for f in files}
    return owners.pop() if len(owners) == 1 and None not in owners else None


# snakemake options whose value may look like a file (the value is not a target)
_PATH_OPTIONS = {
    "--configfile",
    "--configfiles",
    "-s",
    "--snakefile",
    "-d",
    "--directory",
    "--profile",
    "--workflow-profile",
    "--report",
    "--conda-prefix",
    "--shadow-prefix",
    "--apptainer-prefix",
    "--singularity-prefix",
    "--log-handler-script",
    "--stats",
    "--dag",
    "--d3dag",
}


def command_line_targets(argv: list[str]) -> list[str]:
    """The files a snakemake command line names as targets: arguments that look like a
    path (a / or a .), are no option, hold no `=` (`--config k=v`), and are not the value
    of an option that takes a path (`--configfile my.yaml`)."""
    out = []
    for prev, a in zip(["", *argv[1:]], argv[1:], strict=False):
        if a.startswith("-") or "=" in a or prev in _PATH_OPTIONS:
            continue
        if "/" in a or "." in a:
            out.append(a)
    return out

"""The whole config, as the workflow and the commands load it: core's loader
(`mbc.core.config`: presets, the schema, the runs, the references across sections) with the
parts that the layers above core own, config `statistics` (the kinds of statistic,
`mbc.analysis.stat_schema`) and `figures` (each figure's roles, `mbc.paper.figure_tables`).
Imports no numpy, pandas or scipy: every Snakemake start-up pays for it.
`python -m mbc.config FILE ...` checks config files before a run (`mbc.config.__main__`)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from mbc.analysis.stat_schema import statistics_schema
from mbc.core import config as core
from mbc.core.arithmetic import Arithmetic
from mbc.core.config import Config, ConfigError, ConfigFileError, Run, deep_merge, read_yaml
from mbc.paper.figure_tables import check_fit_roles, figures_schema

__all__ = [
    "Config",
    "ConfigError",
    "ConfigFileError",
    "Run",
    "check_files",
    "load",
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
    """Validate and expand the whole config (`mbc.core.config.load`, with the whole schema
    and the figures' checks). Raises ConfigError, naming the key, before any job runs.
    arithmetic: what `auto` means (default: this machine's; `mbc.core.arithmetic`)."""
    return core.load(
        raw, overrides, given_as, schema_fn=schema, checks=(check_fit_roles,), arithmetic=arithmetic
    )


def check_files(paths: list[str], base: str | Path = "config.yaml") -> Config:
    """What `snakemake --configfile P1 P2 ...` would start with: the files merged in order
    over `base`, then validated like the workflow does at start-up."""
    over: dict = {}
    for path in paths:
        over = deep_merge(over, read_yaml(path))
    return load(deep_merge(read_yaml(base), over), over, given_as=None)

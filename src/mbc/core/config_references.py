"""The config's checks across sections (`mbc.core.config_loader.load` runs them after the schema):
what a section names must be declared elsewhere. And `ConfigError`, the one error every
config check raises, naming the key where the user wrote it and its value, and which part
of a snakemake command line (`--config`, `--configfile FILE`) wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad config value; the message names the key and the value."""

    def __init__(self, key: str, value: Any, why: str):
        self.key, self.value = key, value
        super().__init__(f"config key '{key}' = {value!r}: {why}")


def dotted(path: tuple) -> str:
    """A config path as the user writes it: `diagnostics.hessian.source`."""
    return ".".join(str(p) for p in path)


def holds(node: Any, path: tuple) -> bool:
    """Whether the nested dict `node` has a value at `path`."""
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def command_line_origin(path: tuple, argv: list[str]) -> str:
    """Which part of a snakemake command line gave the value at `path`: Snakemake hands
    `--config k=v` and `--configfile FILE` over as one dict. `--config` wins (it is merged
    last), then the last file that holds the path; `--config` when the line says neither."""
    keys, files, into = set(), [], None
    for a in argv:
        if a in ("--config", "-C", "--configfile", "--configfiles"):
            into = keys if a in ("--config", "-C") else files
        elif a.startswith("-"):
            into = None
        elif into is keys:
            keys.add(a.split("=", 1)[0])
        elif into is files:
            files.append(a)
    if path[0] in keys:
        return "--config"
    for f in reversed(files):
        try:
            if holds(yaml.safe_load(Path(f).read_text(encoding="utf-8")), path):
                return f"--configfile {f}:"
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
    return "--config"


def check_references(cfg: dict, written=dotted) -> None:
    """Diagnostics, fits, statistics, figures and the sensitivity tables may only name
    declared experiments, and figures declared fits and statistics (whether a role needs a fit with `by`
    is the figures' to check: `mbc.paper.figure_tables.check_fit_roles`); the plateau band
    must contain 1 (height = log K). An error names the key where the user wrote it
    (`written`)."""
    for name, diag in cfg.get("diagnostics", {}).items():
        src = diag.get("source")
        if src is not None and src not in cfg["experiments"]:
            raise ConfigError(written(("diagnostics", name, "source")), src, "unknown experiment")
    for i, fit in enumerate(cfg.get("fits", [])):
        for exp in fit.get("experiments", []):
            if exp not in cfg["experiments"]:
                raise ConfigError(f"fits[{i}].experiments", exp, "unknown experiment")
    for name, st in (cfg.get("statistics") or {}).items():
        for exp in st.get("experiments", []):
            if exp not in cfg["experiments"]:
                key = written(("statistics", name, "experiments"))
                raise ConfigError(key, exp, "unknown experiment")
    sweep = (cfg.get("robustness") or {}).get("sweep")
    if sweep is not None and sweep not in cfg["experiments"]:
        raise ConfigError(written(("robustness", "sweep")), sweep, "unknown experiment")
    ids = set()
    for i, row in enumerate(cfg.get("scorecard", [])):
        if row["paper_reference"]["traced"] != "ours":
            continue
        if not ({"within", "sign"} & set(row["agree"])):
            msg = "a claim of our own is decided by `within` or `sign`"
            raise ConfigError(f"scorecard[{i}].agree", row["agree"], msg)
        if row["id"] in ids:
            raise ConfigError(f"scorecard[{i}].id", row["id"], "used twice")
        ids.add(row["id"])
    fit_names = {f["name"] for f in cfg.get("fits", [])}
    for i, diff in enumerate(cfg.get("fit_differences", [])):
        for name in diff["of"]:  # a `by` fit's rows are named <name>_at_<by><value>
            if name not in fit_names and name.split("_at_")[0] not in fit_names:
                raise ConfigError(f"fit_differences[{i}].of", name, "no fit of that name")
    for fig, entry in (cfg.get("figures") or {}).items():
        for role, exps in (entry.get("experiments") or {}).items():
            if unknown := [e for e in exps if e not in cfg["experiments"]]:
                key = written(("figures", fig, "experiments", role))
                raise ConfigError(key, unknown[0], "unknown experiment")
        for role, fit in (entry.get("fits") or {}).items():
            key = written(("figures", fig, "fits", role))
            if fit not in fit_names:
                raise ConfigError(key, fit, "no fit of that name")
        for role, name in (entry.get("statistics") or {}).items():
            if name not in (cfg.get("statistics") or {}):
                key = written(("figures", fig, "statistics", role))
                raise ConfigError(key, name, "no statistic of that name")
    for section in ("threshold_sensitivity", "plateau_sensitivity"):
        for exp in cfg.get(section, {}).get("experiments", []):
            if exp not in cfg["experiments"]:
                raise ConfigError(written((section, "experiments")), exp, "unknown experiment")
    band = cfg.get("plateau_sensitivity", {}).get("band")
    if band is not None and not band[0] < 1 < band[1]:
        raise ConfigError(written(("plateau_sensitivity", "band")), band, "need low < 1 < high")

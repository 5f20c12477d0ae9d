"""config.yaml -> validated, frozen run specifications.

Resolution order: the base config, then the chosen preset's overrides, then the
command line's `--config` overrides (so `--config outdir=X preset=smoke` keeps X).
Validation happens once, before any job runs: a JSON schema (unknown keys, types),
then semantic checks that know the task (K <= 36 with distinct first characters, ...).
Every error is a `ConfigError` naming the offending key and value.

This is core's loader: config `statistics` and `figures` are only objects in its schema, since
the layers that read them own their entries' shapes. `mbc.config.load` passes in the whole
schema and the figures' checks; load the config there.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mbc.core.arithmetic import Arithmetic, AutoArithmetic, pack_pays, resolve_auto, slow_precision
from mbc.core.config_files import ConfigFileError, read_yaml  # noqa: F401 (re-exported)
from mbc.core.config_references import (
    ConfigError,
    check_references,
    command_line_origin,
    dotted,
    holds,
)
from mbc.core.layout import Layout, can_be_a_directory, canonical_outdir
from mbc.core.spec import (
    NUMERIC_COLUMNS,
    EvalSpec,
    ModelSpec,
    RunSpec,
    TaskSpec,
    TrainSpec,
    field_value,
    section_schema,
)
from mbc.core.spec_checks import first_problem

SECTIONS = {"task": TaskSpec, "model": ModelSpec, "train": TrainSpec, "eval": EvalSpec}


@dataclass(frozen=True)
class Run:
    """One (experiment, run) membership: identical specs in two experiments train once."""

    experiment: str
    spec: RunSpec

    @property
    def run_id(self) -> str:
        return self.spec.run_id


@dataclass(frozen=True)
class CoreConfig:
    """The part of the config that core reads: the preset, the outdir, the runs and the
    arithmetic `auto` chose. `mbc.config.Config` adds the sections the layers above own
    (diagnostics, fits, statistics, the verdicts, the report); load the config there."""

    raw: dict  # the resolved config (base + preset + overrides), for rules' params
    preset: str
    outdir: str
    runs: tuple[Run, ...]
    # what `auto` resolved to (train.precision, train.compile, pack.enabled); None where
    # the config asked for nothing automatic
    arithmetic: Arithmetic | None = None
    # one line where an explicit precision is the slow choice on this machine (the banner's)
    slow_precision: str | None = None

    @functools.cached_property
    def _spec_by_id(self) -> dict[str, RunSpec]:
        return {r.run_id: r.spec for r in self.runs}

    @property
    def specs(self) -> dict[str, RunSpec]:
        """run id -> spec, a fresh dict each time over one mapping built once (the workflow
        looks specs up per run: rebuilding it each time cost the paper preset 16 s)."""
        return dict(self._spec_by_id)

    def questions(self) -> dict[str, str]:
        """Each experiment this config trains, in its order, -> the question it answers
        (its `question` in config.yaml): the report's table of experiments."""
        declared = self.raw["experiments"]
        names = dict.fromkeys(r.experiment for r in self.runs)
        return {n: str(declared[n].get("question", "")) for n in names}

    def experiment_runs(self, experiment: str) -> list[Run]:
        return [r for r in self.runs if r.experiment == experiment]

    def run_ids(self, experiment: str | None = None, where: dict | None = None) -> list[str]:
        out = []
        for r in self.runs:
            if experiment is not None and r.experiment != experiment:
                continue
            if where and not all(_get(r.spec, k) in v for k, v in where.items()):
                continue
            if r.run_id not in out:
                out.append(r.run_id)
        return out

    def missing_section_key(self) -> tuple[str, str] | None:
        """(section, the key it lacks) for a section that cannot be built, else None: core's
        are whole once the schema passed; `mbc.config.Config` checks the layers' sections."""
        return None


def deep_merge(base: dict, over: dict) -> dict:
    """Recursive dict merge; lists and scalars in `over` replace those in `base`."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@functools.cache
def schema() -> dict:
    """The config schema, read once per process (every run's sections are checked against
    it: re-reading it per run made loading the paper preset take seconds). Not mutated.
    `statistics` and `figures` are only objects here: `mbc.config.schema` shapes them."""
    full = yaml.safe_load(resources.files("mbc.core").joinpath("config.schema.yaml").read_text())
    full["definitions"].update({name: section_schema(cls) for name, cls in SECTIONS.items()})
    full["definitions"]["fit"]["properties"]["x"] = {"enum": NUMERIC_COLUMNS}
    return full


def _is_integer(checker, value: Any) -> bool:
    """An int, not a whole-number float: Draft 2020-12 accepts 300.0 as an integer, and a
    float step count or batch size both changes the run ids and fails later in training."""
    return isinstance(value, int) and not isinstance(value, bool)


# the draft's validator with integers that are ints (jsonschema.validators.extend)
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
Schema = Callable[[], dict]  # the config schema, read once: this module's or mbc.config's


@functools.cache
def _validators(schema_fn: Schema = schema) -> tuple[Validator, Validator]:
    """(the whole config's validator, one run's sections' validator), built once per schema."""
    full = schema_fn()
    sub = {"$ref": "#/definitions/sections", "definitions": full["definitions"]}
    return Validator(full), Validator(sub)


def _schema_check(cfg: dict, where: str, schema_fn: Schema = schema) -> None:
    validator = _validators(schema_fn)[0]
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = [str(p) for p in e.absolute_path]
        value = e.instance if not isinstance(e.instance, dict) else "{...}"
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            # name the unknown key itself, as the user wrote it
            known = set(e.schema.get("properties", {}))
            unknown = sorted(k for k in e.instance if k not in known)
            if unknown:
                path.append(unknown[0])
                value = e.instance[unknown[0]]
                hint = ", ".join(sorted(known))
                raise ConfigError(".".join(path), value, f"unknown key ({where}); known: {hint}")
        raise ConfigError(".".join(path) or "<top level>", value, f"{_why(e)} ({where})")


def _why(e: jsonschema.ValidationError) -> str:
    """The schema's message, with the fix for a whole number written as a float."""
    wanted = e.validator_value if e.validator == "type" else None
    if "integer" in ([wanted] if isinstance(wanted, str) else wanted or []) and (
        isinstance(e.instance, float) and e.instance.is_integer()
    ):
        return f"must be an integer: write {int(e.instance)}, not {e.instance}"
    return e.message


def _coerce(value: Any) -> Any:
    """Snakemake hands nested `--config` values over as strings: restore numbers and bools."""
    if isinstance(value, dict):
        return {k: _coerce(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_coerce(v) for v in value]
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
        return {"true": True, "false": False}.get(value.lower(), value)
    return value


def _coerce_top(value: Any) -> Any:
    """A top-level value: nested ones coerced, and true/false as booleans (other strings,
    such as an outdir, stay strings)."""
    if isinstance(value, dict | list):
        return _coerce(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def resolve(raw: dict, overrides: dict | None = None, schema_fn: Schema = schema) -> dict:
    """Apply the preset named by `preset` and then the command-line overrides."""
    # Snakemake has already merged `--config` into `raw`, so both need the coercion (a
    # top-level `tensorboard=true` arrives as the string "true").
    raw = {k: _coerce_top(v) for k, v in raw.items()}
    overrides = {k: _coerce_top(v) for k, v in (overrides or {}).items()}
    _schema_check(raw, "config", schema_fn)
    preset = overrides.get("preset", raw.get("preset", "paper"))
    presets = raw.get("presets", {})
    if preset != "paper" and preset not in presets:
        raise ConfigError("preset", preset, f"unknown preset; known: {sorted(['paper', *presets])}")
    merged = deep_merge(raw, presets.get(preset, {}))
    merged = deep_merge(merged, overrides)
    merged["preset"] = preset
    merged.pop("presets", None)
    _schema_check(merged, f"after applying preset {preset!r}", schema_fn)
    written = merged["outdir"]
    merged["outdir"] = canonical_outdir(written)
    if str(merged.get("store", "auto")) not in ("", "auto"):
        can_be_a_directory("store", str(merged["store"]))  # restored from, and added to
    if "outdir" in overrides and "paper_pdf" not in overrides:
        # a second outdir must not overwrite the preset's PDF
        merged["paper_pdf"] = Layout(merged["outdir"]).paper_pdf
    _check_paper_pdf(merged)
    return merged


def _check_paper_pdf(merged: dict) -> None:
    """The report's PDF may lie anywhere but among the outdir's other outputs (a figure's
    PDF named as the paper would never be built as the paper)."""
    pdf = os.path.relpath(os.path.realpath(merged["paper_pdf"]), os.path.realpath(merged["outdir"]))
    if not pdf.startswith("..") and Path(pdf).parts[0] != "paper":
        raise ConfigError(
            "paper_pdf",
            merged["paper_pdf"],
            f"is among the outdir's other outputs; use {Layout(merged['outdir']).paper_pdf} "
            "or a path outside the outdir",
        )


def _origin(key: str, origins: dict[str, str], written=dotted) -> str:
    """Where the user wrote the value of run key `key` (e.g. train.lr): the experiment's
    set/grid/variants entry that assigned it, else its `defaults` entry."""
    return origins.get(key) or written(("defaults", *key.split(".", 1)))


def _check_sections(sections: dict, origins: dict[str, str], written=dotted) -> None:
    """Types and enums of one assembled run (grid values bypass the top-level schema)."""
    errors = list(_validators()[1].iter_errors(sections))
    if errors:
        e = errors[0]
        key = ".".join(str(p) for p in e.absolute_path)
        raise ConfigError(_origin(key, origins, written), e.instance, _why(e))


def _get(spec: RunSpec, dotted: str) -> Any:
    return spec.task.d if dotted == "d" else field_value(spec, dotted)


def _apply(sections: dict[str, dict], key: str, value: Any, where: str) -> None:
    if key == "d":  # dataset size D: sets n_groups = D / K (applied after K is known)
        sections["_d"] = value
        return
    section, _, field = key.partition(".")
    cls = SECTIONS.get(section)
    if cls is None or field not in {f.name for f in dataclasses.fields(cls)}:
        raise ConfigError(
            where, value, "not a run parameter (use task.*, model.*, train.*, eval.* or d)"
        )
    sections[section][field] = value


def expand_experiment(
    name: str,
    exp: dict,
    defaults: dict,
    seeds: list[int],
    written=dotted,
    auto: AutoArithmetic | None = None,
) -> list[Run]:
    """Grid (Cartesian product) x variants (list of overrides) x seeds -> runs.

    written(path): the config path as the user wrote it (under `presets.<name>.` when
    the value comes from the preset), used in error messages. auto: resolves
    `train.precision` / `train.compile` `auto` (`mbc.core.arithmetic`)."""
    grid = exp.get("grid", {})
    for key, values in grid.items():
        if not values:
            raise ConfigError(f"experiments.{name}.grid.{key}", values, "empty list of values")
    variants = exp.get("variants", [{}]) or [{}]
    if not exp.get("seeds", seeds):
        where = written(("experiments", name, "seeds") if "seeds" in exp else ("seeds",))
        raise ConfigError(where, exp.get("seeds", seeds), "empty seed list")
    seeds = exp.get("seeds", seeds)
    runs = []
    for combo in itertools.product(*grid.values()):
        for variant in variants:
            for seed in seeds:
                sections = {s: dict(defaults.get(s, {})) for s in SECTIONS}
                assignments = [
                    *((f"set.{k}", k, v) for k, v in exp.get("set", {}).items()),
                    *((f"grid.{k}", k, v) for k, v in zip(grid, combo, strict=True)),
                    *((f"variants.{k}", k, v) for k, v in variant.items()),
                ]
                origins = {}
                for origin, key, value in assignments:
                    where = written(("experiments", name, *origin.split(".", 1)))
                    _apply(sections, key, value, where)
                    origins["task.n_groups" if key == "d" else key] = where
                if "_d" in sections:  # n_groups = round(D / K); the table records n_groups * K
                    d, k = sections.pop("_d"), sections["task"]["k"]
                    sections["task"]["n_groups"] = max(1, round(d / k))
                _check_sections(sections, origins, written)
                resolve_auto(sections["train"], auto)
                spec = RunSpec(
                    task=TaskSpec(**sections["task"]),
                    model=ModelSpec(**sections["model"]),
                    train=TrainSpec(**sections["train"]),
                    eval=EvalSpec(**sections["eval"]),
                    seed=int(seed),
                )
                check_spec(spec, origins, written)
                runs.append(Run(name, spec))
    ids = [r.run_id for r in runs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(
            f"experiments.{name}", dup[0], "duplicate run id (a repeated grid value or seed)"
        )
    return runs


def check_spec(spec: RunSpec, origins: dict[str, str] | None = None, written=dotted) -> None:
    """The semantic checks the schema cannot express (`mbc.core.spec_checks`); names the
    offending key where the user wrote it (`origins`: run key -> config path of the
    experiment entry that set it; any other key came from `defaults`, as `written` places it)."""

    def where(key: str) -> str:
        return _origin(key, origins or {}, written)

    if (problem := first_problem(spec, where)) is not None:
        key, value, why = problem
        raise ConfigError(where(key), value, why)


def load(
    raw: dict,
    overrides: dict | None = None,
    given_as: str | None = "--config",
    schema_fn: Schema = schema,
    checks: tuple[Callable[[dict, Callable[[tuple], str]], None], ...] = (),
    arithmetic: Arithmetic | None = None,
    config_class: type[CoreConfig] = CoreConfig,
) -> CoreConfig:
    """Validate and expand the config. Raises ConfigError before any job runs.
    given_as: how a message names a value that came from `overrides` (Snakemake's
    `--config`); None: by its path alone, as for the config files `mbc.config.check_files`
    merges. schema_fn and checks: the whole schema and the checks (cfg, written) of the
    layers above core (`mbc.config.load`), run after this module's; config_class: the type
    that holds their sections (`mbc.config.Config`). arithmetic: what `auto`
    means (default: this machine's, `mbc.core.arithmetic.resolve`, asked only if some value
    is `auto`)."""
    cfg = resolve(raw, overrides, schema_fn)
    auto = AutoArithmetic(str(cfg.get("device", "auto")), arithmetic)
    experiments = cfg["experiments"]
    only = cfg.get("only") or list(experiments)
    for name in only:
        if name not in experiments:
            raise ConfigError("only", name, f"unknown experiment; known: {sorted(experiments)}")
    preset_raw = (raw.get("presets") or {}).get(cfg["preset"], {})

    def written(path: tuple) -> str:
        """Where the user wrote the value at `path`: on the command line (`--config`,
        which wins), in the preset, else at its own place in config.yaml."""
        if given_as and holds(overrides or {}, path):
            how = command_line_origin(path, sys.argv) if given_as == "--config" else given_as
            return f"{how} {dotted(path)}"
        if holds(preset_raw, path):
            return f"presets.{cfg['preset']}.{dotted(path)}"
        return dotted(path)

    # the defaults themselves, even where every experiment overrides a value
    expand_experiment("defaults", {}, cfg["defaults"], [0], written, auto)
    runs: list[Run] = []
    for name in only:
        exp = resolve_like(name, experiments)
        runs.extend(expand_experiment(name, exp, cfg["defaults"], cfg["seeds"], written, auto))
    _check_same_id_same_spec(runs)
    check_references(cfg, written)
    for check in checks:
        check(cfg, written)
    if cfg.get("pack", {}).get("enabled") == "auto":
        cfg["pack"] = {**cfg["pack"], "enabled": pack_pays([r.spec for r in runs], auto)}
    out = config_class(
        raw=cfg,
        preset=cfg["preset"],
        outdir=cfg["outdir"].rstrip("/"),
        runs=tuple(runs),
        arithmetic=auto.value if auto.asked else None,
        slow_precision=slow_precision([r.spec for r in runs], auto),
    )
    if (missing := out.missing_section_key()) is not None:
        # the schema lets a section leave a key out; the analysis needs every key
        raise ConfigError(*missing, "missing key")
    return out


def resolve_like(name: str, experiments: dict) -> dict:
    """Experiment `name` with `like: X` expanded: X's grid, variants and seeds, X's `set`
    updated by this experiment's own, and this experiment's grid/variants/seeds on top
    (E15 repeats E1 and E2 under another init this way, at whatever sizes the preset gives
    them)."""
    exp = experiments[name]
    base_name = exp.get("like")
    if base_name is None:
        return exp
    where = f"experiments.{name}.like"
    if base_name not in experiments:
        raise ConfigError(where, base_name, f"unknown experiment; known: {sorted(experiments)}")
    base = experiments[base_name]
    if "like" in base:
        raise ConfigError(where, base_name, "names an experiment that is itself `like` another")
    out = {k: copy.deepcopy(v) for k, v in base.items() if k in ("grid", "variants", "seeds")}
    out["set"] = {**base.get("set", {}), **exp.get("set", {})}
    out.update({k: copy.deepcopy(v) for k, v in exp.items() if k in ("grid", "variants", "seeds")})
    return out


def _check_same_id_same_spec(runs: list[Run]) -> None:
    """A run id names one spec. Implementation fields (train.engine, train.compile) are not
    part of the id, so two experiments asking for one run with different engines conflict."""
    seen: dict[str, Run] = {}
    for r in runs:
        first = seen.setdefault(r.run_id, r)
        if first.spec != r.spec:
            a, b = r.spec.to_dict(), first.spec.to_dict()
            diff = sorted(
                f"{s}.{k}"
                for s, v in a.items()
                if isinstance(v, dict)
                for k in v.keys() | b[s].keys()
                if v.get(k) != b[s].get(k)
            )
            raise ConfigError(
                f"experiments.{r.experiment}",
                r.run_id,
                f"same run as in experiment {first.experiment} but different {', '.join(diff)}"
                " (implementation settings must agree for a shared run)",
            )

"""The kinds of statistic config `statistics:` may declare: each kind's parameters, the table
it reads, and the schema of that section derived from them. Declarations only (no numpy, no
scipy): `mbc.config` builds the config schema from them at every Snakemake start-up, and
`mbc.analysis.stat_kinds` pairs each kind with the function that computes it.
`PARAMS` below is the only place a kind's parameters are spelled.
"""

from __future__ import annotations

from dataclasses import dataclass

TABLES = ("tau", "collective", "hessian", "routing_ablation")
COL = {"type": "string", "minLength": 1}
FLAG = {"type": "boolean"}
Y = {"y": COL, "bound": FLAG, "times": COL}
CENSORED = {"censored": COL}


@dataclass(frozen=True)
class KindParams:
    params: dict  # parameter -> JSON schema
    required: tuple[str, ...] = ()
    table: str = "tau"  # the table it reads unless the statistic names another
    keeps_diverged: bool = False


AVERAGE = {"column": COL, "over_log_k": FLAG, "measured": COL} | CENSORED
PAIR_VALUE = {"oneOf": [{"enum": ["max", "min"]}, {"type": "number"}]}
PARAMS: dict[str, KindParams] = {
    "mean": KindParams(AVERAGE, ("column",)),
    "median": KindParams(AVERAGE, ("column",)),
    "fraction": KindParams({"column": COL, "is": FLAG, "ci": FLAG} | CENSORED, ("column",)),
    "spearman": KindParams({"x": COL, "abs": FLAG} | Y | CENSORED, ("x", "y")),
    "ratio": KindParams(
        {
            "by": COL,
            "pair": {"type": "array", "minItems": 2, "maxItems": 2, "items": PAIR_VALUE},
            "censored_unmeasured": FLAG,
        }
        | Y
        | CENSORED,
        ("by", "pair", "y"),
    ),
    "paired_ratio": KindParams(
        {
            "across": COL,
            "pair_by": {"type": "array", "items": COL},
            "numerator": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "denominator": {"type": "string"},
        }
        | Y
        | CENSORED,
        ("across", "pair_by", "numerator", "denominator", "y"),
    ),
    "loglog_slope": KindParams(
        {"x": COL, "y": COL, "y_bound": COL, "offset": {"type": "number", "minimum": 0}} | CENSORED,
        ("x", "y"),
    ),
    "nearest_fraction": KindParams(
        {"column": COL, "at": {"type": "number", "exclusiveMinimum": 0}},
        ("column", "at"),
        table="collective",
    ),
    "mode_at_min": KindParams(
        {"column": COL, "at_min": COL}, ("column", "at_min"), "routing_ablation"
    ),
    "runs": KindParams(CENSORED, keeps_diverged=True),
}

BOUNDS = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {op: {"type": "number"} for op in ("min", "max", "above", "below")},
}
COMMON = {
    "what": {"type": "string"},  # str.format'ed with the entry and {experiments}: E1+E2
    "table": {"enum": list(TABLES)},
    "experiments": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    "where": {
        "type": "object",
        "additionalProperties": {
            "oneOf": [BOUNDS, {"type": "array", "minItems": 1}, {"type": ["string", "number"]}]
        },
    },
}


def statistics_schema() -> dict:
    """config `statistics`: name -> {kind, what, ...}, the kind's parameters and no other."""
    per_kind = [
        {
            "if": {"properties": {"kind": {"const": name}}},
            "then": {
                "properties": {"kind": {"const": name}} | COMMON | k.params,
                "additionalProperties": False,
                "required": list(k.required),
            },
        }
        for name, k in PARAMS.items()
    ]
    entry = {
        "type": "object",
        "required": ["kind", "what"],
        "properties": {"kind": {"enum": list(PARAMS)}},
        "allOf": per_kind,
    }
    return {
        "type": "object",
        "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
        "additionalProperties": entry,
    }

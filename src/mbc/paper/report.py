"""Generated LaTeX inputs of the paper: booktabs tables and numbers.tex (showyourwork's idea).

Every macro and table cell comes from a results table; the paper source types no number.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from importlib import resources

import pandas as pd
import yaml

from mbc.analysis.diverged import diverged_ids
from mbc.analysis.hypotheses import verdicts
from mbc.core.spec import ModelSpec
from mbc.paper.config_sections import Macro
from mbc.paper.latex import Raw, booktabs_table, format_number, is_missing, macro_name, numbers_tex
from mbc.paper.typeset import tex_text


def readable(name: str, labels: dict[str, str]) -> str:
    """A statistic's name as the paper's tables print it (config `labels`): `fit:<fit>` is
    the fit's label, `fit_r2:<fit>` "R^2 of" it, and a `by` fit's `_at_d2000` reads
    "at D = 2000". A name without a label stays as it is."""
    prefix, _, base = name.rpartition(":")
    head, _, at = base.partition("_at_")
    label = labels.get(base) or labels.get(head)
    if label is None:
        return name
    if at and base not in labels:
        m = re.fullmatch(r"([a-z_]+?)([0-9.e+-]+)", at)
        label += f" at {m.group(1).upper()} = {m.group(2)}" if m else f" at {at}"
    return f"R^2 of the fit: {label}" if prefix == "fit_r2" else label


COUNT_COLUMNS = {"n", "n_censored", "n_diverged"}  # statistics.csv's integer columns


def _natural(name: str) -> list:
    """Sort key: `_d2000` before `_d10000`."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def statistic_macros(macros: Sequence[Macro], stats: pd.DataFrame) -> dict:
    """config `report.macros`: each macro's column of its statistics.csv row (None renders
    as n/a: no such statistic, or no value). A `*` takes the first match in natural order."""
    out = {}
    for m in macros:
        names = sorted((n for n in stats.name if fnmatch.fnmatchcase(n, m.statistic)), key=_natural)
        value = stats.loc[stats.name == names[0], m.column].iloc[0] if names else None
        if value is None or pd.isna(value):
            out[m.name] = None
        else:  # counts stay integers
            out[m.name] = int(value) if m.column in COUNT_COLUMNS else float(value)
    return out


def numbers(preset: str, tau: pd.DataFrame, hyp: pd.DataFrame, card: pd.DataFrame) -> dict:
    """The report's own macros: counts of runs, scorecard rows (the paper's claims; the
    claims of our own are counted in `robustness_numbers`) and verdicts (Verdict<id>)."""
    runs = tau.drop_duplicates("run_id")
    paper = card[card.reference_traced != "ours"]
    dual = paper.ours_statistic != paper.statistic
    n_exp = tau.experiment.nunique()
    out = {
        "Preset": preset,
        "NRuns": len(runs),
        "NRunsCensored": int(runs.censored.astype(bool).sum()),
        "NRunsDiverged": len(diverged_ids(runs)),  # left out as config `diverged` says
        "NExperiments": n_exp,
        # the abstract's nouns, singular where a count is 1 (`only` one experiment)
        "RunsNoun": "run" if len(runs) == 1 else "runs",
        "ExperimentsNoun": "experiment" if n_exp == 1 else "experiments",
        "NScorecardAgree": int((paper.agreement == "agree").sum()),
        "NScorecardAgreeOurs": int((paper.ours_agreement == "agree").sum()),
        "NScorecardDual": int(dual.sum()),
        "NScorecardRobust": int((paper.robust_to_definition.astype(bool) & dual).sum()),
        "NScorecardRows": len(paper),
        "NScorecardUntraced": int((paper.reference_traced == "paper_text").sum()),
        "NVerdictsDual": int(hyp.groupby("id").dual.any().sum()),
        "NVerdictsRobust": int(
            hyp[hyp.groupby("id").dual.transform("any")]
            .drop_duplicates("id")
            .robust_to_definition.astype(bool)
            .sum()
        ),
    }
    for hid, verdict in verdicts(hyp).items():  # H1 -> VerdictHOne
        out[macro_name("Verdict", hid)] = verdict
    return out


def robustness_numbers(robust: pd.DataFrame, init_scale: pd.DataFrame, tau: pd.DataFrame) -> dict:
    """E15's own macros: the sweep's range, the alternative init's std, and the verdict of
    each claim of our own (R1 -> VerdictROne); its statistics are config `report.macros`."""
    # the std of the runs under another init than the default (E15's alternative init)
    alt = tau.loc[tau["init"] != ModelSpec().init, "init_std"].unique()
    out = {
        "InitSweepScaleMin": float(init_scale.init_scale.min()) if len(init_scale) else None,
        "InitSweepScaleMax": float(init_scale.init_scale.max()) if len(init_scale) else None,
        "AltInitStd": float(alt[0]) if len(alt) == 1 else None,
    }
    first = robust.drop_duplicates("id")
    for rid, verdict in zip(first.id, first.verdict, strict=True):
        out[macro_name("Verdict", rid)] = verdict  # R1 -> VerdictROne
    out["NRobustnessSupported"] = int((first.verdict == "supported").sum())
    out["NRobustnessTests"] = len(first)
    return out


def _layouts() -> dict[str, dict]:
    """tables.yaml: each generated table's caption, label, column headers and layout, as
    `booktabs_table` keywords; the fields its `tex` lists stay LaTeX, the rest is escaped."""
    text = resources.files("mbc.paper").joinpath("tables.yaml").read_text()
    out = {}
    for name, spec in yaml.safe_load(text).items():
        tex = set(spec.pop("tex", []))
        if "caption" in tex:
            spec["caption"] = Raw(spec["caption"])
        spec["columns"] = {c: Raw(h) if c in tex else h for c, h in spec["columns"].items()}
        out[name] = spec
    return out


LAYOUTS = _layouts()


def init_scale_tex(table: pd.DataFrame) -> str:
    table = table.assign(
        tau_ci=ci_cells(table, "tau_mean", "tau_ci_low", "tau_ci_high"),
        height_ci=ci_cells(table, "height_over_log_k", "height_ci_low", "height_ci_high", ".3f"),
    )
    return booktabs_table(table, **LAYOUTS["init_scale"])


def init_comparison_tex(table: pd.DataFrame) -> str:
    table = table.assign(
        row=[
            tex_text(q if not m else f"{q}, {_at(m)}")
            for q, m in zip(table.quantity, table["match"].fillna(""), strict=True)
        ],
        default_ci=ci_cells(table, "default", "default_ci_low", "default_ci_high"),
        alternative_ci=ci_cells(table, "alternative", "alternative_ci_low", "alternative_ci_high"),
    )
    return booktabs_table(table, **LAYOUTS["init_comparison"])


def _at(match: str) -> str:
    """What a `*` glob matched, as the tables say it: `d10000` -> "at D = 10000"."""
    m = re.fullmatch(r"([a-z_]+?)([0-9.e+-]+)", match)
    return f"at {m.group(1).upper()} = {m.group(2)}" if m else match


def robustness_tex(table: pd.DataFrame, labels: dict | None = None) -> str:
    rows = _verdict_rows(table, labels)
    return booktabs_table(
        rows.assign(statement=[tex_text(x) for x in rows.statement]), **LAYOUTS["robustness"]
    )


def numbers_file(values: dict) -> str:
    fmt = {k: ".3g" for k, v in values.items() if isinstance(v, float)}
    return numbers_tex(values, fmt=fmt, source="mbc.paper.report.numbers (generated; do not edit)")


def fits_table(fits: pd.DataFrame, labels: dict | None = None) -> str:
    """A Tobit fit's R^2 (least squares' measure, against censored points) means nothing:
    its cell is left empty and the caption says why. A fit with too few uncensored runs
    has no row: one sentence under the table names them all."""
    named = fits.assign(
        name=[tex_text(readable(n, labels or {})) for n in fits.name],
        r2=fits.r2.where(fits.method != "tobit"),
    )
    short = named.method == "insufficient"
    names = list(named.name[short])
    note = (
        f"Too few uncensored runs to fit {'it' if len(names) == 1 else 'them'}, no row: "
        + "; ".join(names)
        + "."
        if names
        else None
    )
    return booktabs_table(named[~short], **LAYOUTS["fits"], notes=Raw(note) if note else None)


def experiments_table(tau: pd.DataFrame, questions: dict[str, str]) -> str:
    """Every experiment of the config once (`questions`: id -> its `question`), with its
    runs in this report's tau table, so that the text can cite an id in brackets."""
    runs = tau.groupby("experiment")["run_id"].nunique() if len(tau) else pd.Series(dtype=int)
    rows = pd.DataFrame(
        {
            "experiment": list(questions),
            "question": list(questions.values()),
            "runs": [int(runs.get(n, 0)) for n in questions],
        }
    )
    return booktabs_table(rows, **LAYOUTS["experiments"])


def ci_cells(df: pd.DataFrame, value: str, lo: str, hi: str, spec: str = ".3g") -> list[str]:
    """`value [lo, hi]` cells (LaTeX) of three columns of `df`: a table's `latex_cells`."""
    return [value_with_ci(*r, spec=spec) for r in zip(df[value], df[lo], df[hi], strict=True)]


def value_with_ci(value, lo, hi, spec: str = ".3g") -> str:
    """One LaTeX cell: `value [lo, hi]`, or the value alone without a CI (en dash when
    missing)."""
    v = _number(value, spec)
    if is_missing(lo) or is_missing(hi):
        return v
    return f"{v} [{_number(lo, spec)}, {_number(hi, spec)}]"


def _number(value, spec: str) -> str:
    """`format_number`, but thousands up to a million as whole numbers (5347, not
    5.35 x 10^3): a step count or an anisotropy reads better so."""
    if spec == ".3g" and not is_missing(value) and 1e3 <= abs(float(value)) < 1e6:
        return format_number(round(float(value)), "d")
    return format_number(value, spec)


def _verdict_rows(df: pd.DataFrame, labels: dict | None) -> pd.DataFrame:
    """Rows of a verdict table: readable statistic names and `value [CI]` cells."""
    return df.assign(
        statistic=[tex_text(readable(n, labels or {})) for n in df.statistic],
        value_ci=ci_cells(df, "value", "ci_low", "ci_high"),
    )


def _rule_cell(rule: str) -> str:
    """'supported if CI > 0.5; falsified if ...' -> 'CI > 0.5', typeset."""
    return tex_text(rule.split(";")[0].removeprefix("supported if "))


def hypotheses_table(hyp: pd.DataFrame, labels: dict | None = None) -> str:
    """Per test: the statistic, its value, the rule; per hypothesis our verdict, our
    uniform one and the paper's (a labelled reference from config)."""
    rows = _verdict_rows(hyp, labels)
    paper = rows["paper_verdict"] if "paper_verdict" in rows else pd.Series("", index=rows.index)
    rows = rows.assign(rule_cell=[_rule_cell(r) for r in rows.rule], paper_verdict=paper.fillna(""))
    return booktabs_table(rows, **LAYOUTS["hypotheses"])


def claims_with_match(card: pd.DataFrame) -> list[str]:
    """Each row's claim; a claim whose statistic is a glob has a row per match, and each
    says which (`..., at D = 60`)."""
    twins = card.claim.duplicated(keep=False) & card.statistic.str.contains("_at_")
    at = [_at(s.rpartition("_at_")[2]) for s in card.statistic]
    return [f"{c} ({a})" if t else c for c, a, t in zip(card.claim, at, twins, strict=True)]


def _paper_cell(row) -> str:
    """The paper's value, daggered when it is traced to the paper's text only."""
    return tex_text(row.paper_reference) + (
        r"$^\dagger$" if row.reference_traced == "paper_text" else ""
    )


def scorecard_table(card: pd.DataFrame) -> str:
    """The paper's claims, each with its reference, its rule and our measurement by the
    author's statistic; the claims of our own are the robustness table (`robustness_tex`),
    our uniform statistics the definitions table (`definitions_table`)."""
    card = card[card.reference_traced != "ours"]
    card = card.assign(
        claim_cell=[tex_text(c) for c in claims_with_match(card)],
        paper_cell=[_paper_cell(r) for r in card.itertuples()],
        rule_cell=[tex_text(t) for t in card.tolerance],
        measured_ci=ci_cells(card, "measured", "ci_low", "ci_high"),
    )
    return booktabs_table(card, **LAYOUTS["scorecard"])


def definitions_table(card: pd.DataFrame) -> str:
    """The claims the author computed with another statistic than our uniform one: both
    measurements and their agreements under the same rule."""
    card = card[(card.reference_traced != "ours") & (card.ours_statistic != card.statistic)]
    card = card.assign(
        claim_cell=[tex_text(c) for c in claims_with_match(card)],
        measured_ci=ci_cells(card, "measured", "ci_low", "ci_high"),
        ours_ci=ci_cells(card, "ours_measured", "ours_ci_low", "ours_ci_high"),
    )
    return booktabs_table(card, **LAYOUTS["definitions"])

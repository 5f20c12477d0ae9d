"""Generated LaTeX inputs of the paper: booktabs tables and numbers.tex (showyourwork's idea).

Every macro and table cell comes from a results table; the paper source types no number.
"""

from __future__ import annotations

import re
from importlib import resources

import pandas as pd
import yaml

from mbc.analysis.diverged import diverged_ids
from mbc.analysis.hypotheses import verdicts
from mbc.core.spec import ModelSpec
from mbc.paper.latex import Raw, booktabs_table, format_number, is_missing, macro_name, numbers_tex


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


def _stat(stats: pd.DataFrame, name: str, col: str = "value"):
    row = stats.loc[stats.name == name]
    return None if row.empty or pd.isna(row[col].iloc[0]) else float(row[col].iloc[0])


def numbers(preset: str, tau: pd.DataFrame, fits: pd.DataFrame, stats: pd.DataFrame,
            hyp: pd.DataFrame, card: pd.DataFrame) -> dict:  # fmt: skip
    """The macro values the paper prose uses (None renders as n/a)."""
    runs = tau.drop_duplicates("run_id")
    fit = fits.set_index("name")

    def f(name, col):
        return (
            None
            if name not in fit.index or pd.isna(fit.loc[name, col])
            else float(fit.loc[name, col])
        )

    at_d = sorted(
        (int(m.group(1)), n) for n in fits.name if (m := re.fullmatch(r"tau_vs_k_at_d(\d+)", n))
    )
    v = verdicts(hyp)
    out = {
        "Preset": preset,
        "NRuns": len(runs),
        "NRunsCensored": int(runs.censored.astype(bool).sum()),
        "NRunsDiverged": len(diverged_ids(runs)),  # left out as config `diverged` says
        "NExperiments": tau.experiment.nunique(),
        "PlateauHeightOverLogKMean": _stat(stats, "plateau_height_over_log_k"),
        "FitTauVsDExponent": f("tau_vs_d", "exponent"),
        "FitTauVsDCILow": f("tau_vs_d", "ci_low"),
        "FitTauVsDCIHigh": f("tau_vs_d", "ci_high"),
        "FitTauVsDRsq": f("tau_vs_d", "r2"),
        "FitTauVsDN": None if "tau_vs_d" not in fit.index else int(fit.loc["tau_vs_d", "n"]),
        "FitTauVsKAtSmallestDExponent": f(at_d[0][1], "exponent") if at_d else None,
        "LeadFractionMean": _stat(stats, "lead_fraction_mean"),
        "LeadFractionFirstMean": _stat(stats, "lead_fraction_first_mean"),
        "AnisotropyMedian": _stat(stats, "anisotropy_plateau_median"),
        "AnisotropyMedianPower": _stat(stats, "anisotropy_plateau_median_power"),
        "NScorecardAgree": int((card.agreement == "agree").sum()),
        "NScorecardAgreeOurs": int((card.ours_agreement == "agree").sum()),
        "NScorecardDual": int((card.ours_statistic != card.statistic).sum()),
        "NScorecardRobust": int(
            (card.robust_to_definition.astype(bool) & (card.ours_statistic != card.statistic)).sum()
        ),
        "NScorecardRows": len(card),
        "NScorecardUntraced": int((card.reference_traced == "paper_text").sum()),
        "NVerdictsDual": int(hyp.groupby("id").dual.any().sum()),
        "NVerdictsRobust": int(
            hyp[hyp.groupby("id").dual.transform("any")]
            .drop_duplicates("id")
            .robust_to_definition.astype(bool)
            .sum()
        ),
    }
    for i in range(1, 8):  # H1 -> VerdictHOne
        out[macro_name("Verdict", f"H{i}")] = v.get(f"H{i}")
    return out


def robustness_numbers(
    fits: pd.DataFrame, stats: pd.DataFrame, robust: pd.DataFrame, init_scale: pd.DataFrame,
    tau: pd.DataFrame,
) -> dict:  # fmt: skip
    """E15's macros: the sweep's range, the init-scale exponent, the D-law under the
    alternative init, the verdict of each pre-registered statement (R1 -> VerdictROne)."""
    fit = fits.set_index("name")
    # the std of the runs under another init than the default (E15's alternative init)
    alt = tau.loc[tau["init"] != ModelSpec().init, "init_std"].unique()

    def f(name, col):
        ok = name in fit.index and not pd.isna(fit.loc[name, col])
        return float(fit.loc[name, col]) if ok else None

    out = {
        "InitSweepScaleMin": float(init_scale.init_scale.min()) if len(init_scale) else None,
        "InitSweepScaleMax": float(init_scale.init_scale.max()) if len(init_scale) else None,
        "AltInitStd": float(alt[0]) if len(alt) == 1 else None,
    }
    for name, macro, value in (("tau_vs_init_std", "FitTauVsInitStd", "Exponent"),
                               ("tau_vs_d_alt_init", "FitTauVsDAltInit", "Exponent"),
                               ("d_exponent_init_shift", "DExponentInitShift", "")):  # fmt: skip
        out[f"{macro}{value}"] = f(name, "exponent")
        out[f"{macro}CILow"] = f(name, "ci_low")
        out[f"{macro}CIHigh"] = f(name, "ci_high")
    out["FitTauVsInitStdRsq"] = f("tau_vs_init_std", "r2")
    out["PlateauHeightAltInit"] = _stat(stats, "plateau_height_over_log_k_alt_init")
    out["PlateauHeightInitSweep"] = _stat(stats, "plateau_height_over_log_k_init_sweep")
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
        row=[q if not m else f"{q}, {m}" for q, m in zip(table.quantity, table["match"].fillna(""), strict=True)],
        default_ci=ci_cells(table, "default", "default_ci_low", "default_ci_high"),
        alternative_ci=ci_cells(table, "alternative", "alternative_ci_low", "alternative_ci_high"),
    )  # fmt: skip
    return booktabs_table(table, **LAYOUTS["init_comparison"])


def robustness_tex(table: pd.DataFrame, labels: dict | None = None) -> str:
    return booktabs_table(_verdict_rows(table, labels), **LAYOUTS["robustness"])


def numbers_file(values: dict) -> str:
    fmt = {k: ".3g" for k, v in values.items() if isinstance(v, float)}
    return numbers_tex(values, fmt=fmt, source="mbc.paper.report.numbers (generated; do not edit)")


def fits_table(fits: pd.DataFrame, labels: dict | None = None) -> str:
    rows = fits.assign(name=[readable(n, labels or {}) for n in fits.name])
    return booktabs_table(rows, **LAYOUTS["fits"])


def ci_cells(df: pd.DataFrame, value: str, lo: str, hi: str, spec: str = ".3g") -> list[str]:
    """`value [lo, hi]` cells (LaTeX) of three columns of `df`: a table's `latex_cells`."""
    return [value_with_ci(*r, spec=spec) for r in zip(df[value], df[lo], df[hi], strict=True)]


def value_with_ci(value, lo, hi, spec: str = ".3g") -> str:
    """One LaTeX cell: `value [lo, hi]`, or the value alone without a CI (en dash when
    missing)."""
    v = format_number(value, spec)
    if is_missing(lo) or is_missing(hi):
        return v
    return f"{v} [{format_number(lo, spec)}, {format_number(hi, spec)}]"


def _verdict_rows(df: pd.DataFrame, labels: dict | None) -> pd.DataFrame:
    """Rows of a verdict table: readable statistic names and `value [CI]` cells."""
    return df.assign(
        statistic=[readable(n, labels or {}) for n in df.statistic],
        value_ci=ci_cells(df, "value", "ci_low", "ci_high"),
    )


def hypotheses_table(hyp: pd.DataFrame, labels: dict | None = None) -> str:
    return booktabs_table(_verdict_rows(hyp, labels), **LAYOUTS["hypotheses"])


def scorecard_table(card: pd.DataFrame) -> str:
    card = card.assign(
        source=card["reference_traced"].map(
            {"author_run": "run", "paper_text": "text", "ours": "ours"}
        ),
        measured_ci=ci_cells(card, "measured", "ci_low", "ci_high"),
        ours_ci=ci_cells(card, "ours_measured", "ours_ci_low", "ours_ci_high"),
    )
    return booktabs_table(card, **LAYOUTS["scorecard"])

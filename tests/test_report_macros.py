"""numbers.tex's statistic macros come from config `report.macros` (mbc.paper.report)."""

from pathlib import Path

import pandas as pd
import yaml

from mbc.paper.config_sections import Macro, Report
from mbc.paper.report import statistic_macros

ROOT = Path(__file__).resolve().parents[1]


def test_a_macro_reads_its_column_and_a_glob_takes_the_first_in_natural_order():
    stats = pd.DataFrame(
        [
            ("fit:tau_vs_k_at_d10000", 0.3, 0.1, 0.5, 9),
            ("fit:tau_vs_k_at_d2000", -0.1, -0.2, 0.0, 6),
            ("fit:tau_vs_d", 1.2, 1.1, 1.3, 18),
            ("empty", float("nan"), None, None, 0),
        ],
        columns=["name", "value", "ci_low", "ci_high", "n"],
    )
    macros = (
        Macro("SmallestD", "fit:tau_vs_k_at_d*"),
        Macro("Low", "fit:tau_vs_d", "ci_low"),
        Macro("N", "fit:tau_vs_d", "n"),
        Macro("Gone", "no_such_statistic"),
        Macro("Empty", "empty"),
    )
    got = statistic_macros(macros, stats)
    assert got == {"SmallestD": -0.1, "Low": 1.1, "N": 18, "Gone": None, "Empty": None}
    assert isinstance(got["N"], int)


def test_the_configs_macros_are_typed_and_name_statistics_or_columns():
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())["report"]  # the live declaration
    report = Report.from_raw(raw)
    assert len(report.macros) == len(raw["macros"]) > 10
    by_name = {m.name: m for m in report.macros}
    assert by_name["FitTauVsDN"] == Macro("FitTauVsDN", "fit:tau_vs_d", "n")
    assert by_name["FitTauVsDExponent"] == Macro("FitTauVsDExponent", "fit:tau_vs_d", "value")

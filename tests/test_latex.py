"""Tests for mbc.paper.latex and for paper/main.tex (compiled when latexmk is installed)."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mbc.config import read_yaml
from mbc.paper.config_sections import Figures
from mbc.paper.figures.captions import CAPTIONS, caption_tex
from mbc.paper.figures.drawn import Drawn
from mbc.paper.latex import (
    EN_DASH,
    NA_VALUE,
    Raw,
    booktabs_table,
    escape_latex,
    format_number,
    macro_name,
    macro_names,
    numbers_tex,
)

REPO = Path(__file__).resolve().parents[1]
MAIN_TEX = REPO / "paper" / "main.tex"

VERDICTS = [f"VerdictH{w}" for w in ("One", "Two", "Three", "Four", "Five", "Six", "Seven")]
#: Every macro the report prose may use; the generator must define them all.
PAPER_MACROS = [
    # E15 (robustness to the initialisation scale)
    "InitSweepScaleMin",
    "InitSweepScaleMax",
    "AltInitStd",
    "FitTauVsInitStdExponent",
    "FitTauVsInitStdCILow",
    "FitTauVsInitStdRsq",
    "FitTauVsInitStdCIHigh",
    "FitTauVsDAltInitExponent",
    "FitTauVsDAltInitCILow",
    "FitTauVsDAltInitCIHigh",
    "DExponentInitShift",
    "DExponentInitShiftCILow",
    "DExponentInitShiftCIHigh",
    "PlateauHeightAltInit",
    "PlateauHeightInitSweep",
    "NRobustnessSupported",
    "NRobustnessTests",
    "VerdictROne",
    "VerdictRTwo",
    "VerdictRThree",
    "VerdictRFour",
    "Preset",
    "NRuns",
    "NRunsCensored",
    "NRunsDiverged",
    "NExperiments",
    "RunsNoun",
    "ExperimentsNoun",
    "PlateauHeightOverLogKMean",
    "FitTauVsDExponent",
    "FitTauVsDCILow",
    "FitTauVsDCIHigh",
    "FitTauVsDRsq",
    "FitTauVsDN",
    "FitTauVsKAtSmallestDExponent",
    "FitTauSampledVsDExponent",
    "FitTauSampledVsDCILow",
    "FitTauSampledVsDCIHigh",
    "FitTauSampledVsDRsq",
    "FitTauSampledVsDN",
    "FitTauSampledVsKAtSmallestDExponent",
    "LeadFractionMean",
    "LeadFractionFirstMean",
    "AnisotropyMedianPower",
    "NScorecardAgreeOurs",
    "NScorecardRobust",
    "NScorecardDual",
    "NVerdictsDual",
    "NScorecardUntraced",
    "NVerdictsRobust",
    "AnisotropyMedian",
    *VERDICTS,
    "NScorecardAgree",
    "NScorecardRows",
]
FIGURES = [
    "loss_curves",
    "tau_vs_d",
    "noise",
    "collective",
    "routing",
    "hessian",
    "init_scale",
    "appendix_linear",
    "appendix_direction",
    "appendix_label_noise",
    "appendix_sharing",
    "appendix_threshold",
    "appendix_plateau",
]
TABLES = {
    "experiments": "tab:experiments",
    "fits": "tab:fits",
    "hypotheses": "tab:hypotheses",
    "scorecard": "tab:scorecard",
    "init_scale": "tab:init_scale",
    "init_comparison": "tab:init_comparison",
    "robustness": "tab:robustness",
    "definitions": "tab:definitions",
}
#: The generated paragraphs of the outcome in words (mbc.paper.outcome), by file name.
PROSE = ("abstract", "explanations", "conclusion")
NEWCOMMAND_RE = re.compile(r"\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}")


# --------------------------------------------------------------------------- escaping


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a_b", r"a\_b"),
        ("50%", r"50\%"),
        ("R&D", r"R\&D"),
        ("#1", r"\#1"),
        ("$5", r"\$5"),
        ("{x}", r"\{x\}"),
        ("~", r"\textasciitilde{}"),
        ("x^2", r"x\textasciicircum{}2"),
        ("a\\b", r"a\textbackslash{}b"),
        ("plain text", "plain text"),
        ("two\nlines", "two lines"),
        ("|rho|", r"\textbar{}rho\textbar{}"),
        ("a < b > c", r"a \textless{} b \textgreater{} c"),
    ],
)
def test_escape_latex(raw, expected):
    assert escape_latex(raw) == expected


def test_escape_is_single_pass():
    # The backslash replacement must not be re-escaped by the brace rule.
    assert escape_latex("\\{") == r"\textbackslash{}\{"
    assert escape_latex(Raw(r"$\tau$")) == r"$\tau$"


def test_format_number():
    assert format_number(3) == "3"
    assert format_number(np.int64(-3)) == r"\ensuremath{-}3"
    assert format_number(2.0) == "2"
    assert format_number(1.23456, ".2f") == "1.23"
    assert format_number(0.5, ".1%") == r"50.0\%"
    assert format_number(1.2e-5) == r"\ensuremath{1.2\times 10^{-5}}"
    assert format_number(-12345.6) == r"\ensuremath{-1.23\times 10^{4}}"
    assert format_number(math.inf) == r"\ensuremath{\infty}"
    assert format_number(float("nan")) == EN_DASH
    assert format_number(None, missing="?") == "?"
    # float rounding of an exact zero reads as 0, not -4.48 x 10^-16; 1e-12 and above stay
    assert format_number(-4.48e-16) == "0" and format_number(3e-13, ".3g") == "0"
    assert format_number(2e-12) == r"\ensuremath{2\times 10^{-12}}"
    assert format_number(np.bool_(True)) == "yes"
    assert format_number(1.5, "{:.1f}x") == "1.5x"
    with pytest.raises(TypeError):
        format_number("1.0")


# --------------------------------------------------------------------------- macro names


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (("fit", "tau_vs_d", "exponent"), "FitTauVsDExponent"),
        (("k5",), "KFive"),
        (("verdict", "h1"), "VerdictHOne"),
        (("verdict", "H7"), "VerdictHSeven"),
        (("tau", "k", 36), "TauKThreeSix"),
        (("d10000",), "DOneZeroZeroZeroZero"),
        (("NRunsCensored",), "NRunsCensored"),
        (("n runs-censored.mean",), "NRunsCensoredMean"),
        ((("fit", "rsq"),), "FitRsq"),
        (("x0y9",), "XZeroYNine"),
    ],
)
def test_macro_name(parts, expected):
    name = macro_name(*parts)
    assert name == expected
    assert re.fullmatch(r"[A-Za-z]+", name)


def test_macro_name_digits_keep_names_distinct():
    names = {macro_name("k", str(i)) for i in range(100)}
    assert len(names) == 100
    assert macro_name("k12") != macro_name("k1", "k2")


@pytest.mark.parametrize("parts", [(), ("",), ("__",), ("τ",), ("LaTeX",), ("huge",), (None,)])
def test_macro_name_rejects(parts):
    with pytest.raises(ValueError):
        macro_name(*parts)


def test_macro_names_collisions_rejected():
    assert macro_names(["k5", "k6"]) == {"k5": "KFive", "k6": "KSix"}
    with pytest.raises(ValueError, match="collision"):
        macro_names(["k5", "k_5"])
    with pytest.raises(ValueError, match="collision"):
        macro_names(["H1", "h1"])
    with pytest.raises(ValueError, match="collision"):
        macro_names(["k_five", "k5"])


# --------------------------------------------------------------------------- numbers.tex


def _parse_numbers(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("%"):
            continue
        m = NEWCOMMAND_RE.fullmatch(line)
        assert m, f"not a \\newcommand line: {line!r}"
        assert m.group(1) not in out
        out[m.group(1)] = m.group(2)
    return out


def test_numbers_tex_lines_parse_and_sort():
    text = numbers_tex(
        {
            "NRuns": 12,
            "fit_tau_vs_d_exponent": 1.20534,
            ("verdict", "h1"): "not enough data",
            "\\Preset": "smoke_test",
            "LeadFractionMean": None,
            "AnisotropyMedian": float("nan"),
            "Ratio": np.float64(0.25),
            "Math": Raw(r"\ensuremath{\alpha}"),
            "Tricky": "50% of {a} & #b ~ ^ $ \\",
        },
        fmt={"fit_tau_vs_d_exponent": ".3f", "Ratio": ".0%"},
        source="workflow/scripts/report.py",
    )
    assert text.startswith("%")
    assert "Generated" in text.splitlines()[0]
    assert text.endswith("\n")
    parsed = _parse_numbers(text)
    assert list(parsed) == sorted(parsed)
    assert parsed == {
        "AnisotropyMedian": NA_VALUE,
        "FitTauVsDExponent": "1.205",
        "LeadFractionMean": NA_VALUE,
        "Math": r"\ensuremath{\alpha}",
        "NRuns": "12",
        "Preset": r"smoke\_test",
        "Ratio": r"25\%",
        "Tricky": r"50\% of \{a\} \& \#b \textasciitilde{} \textasciicircum{} \$ \textbackslash{}",
        "VerdictHOne": "not enough data",
    }


def test_numbers_tex_rejects_bad_input():
    with pytest.raises(ValueError, match="collision"):
        numbers_tex({"NRuns": 1, "n_runs": 2})
    with pytest.raises(ValueError):
        numbers_tex({"fit-2": 1, "": 2})
    with pytest.raises(KeyError):
        numbers_tex({"NRuns": 1}, fmt={"NRunz": "d"})
    with pytest.raises(ValueError, match="braces"):
        numbers_tex({"Bad": Raw(r"\textbf{x")})
    with pytest.raises(TypeError):
        numbers_tex({"Bad": [1, 2]})


# --------------------------------------------------------------------------- tables


def _demo_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "fit_name": ["tau_vs_d", "tau_vs_k & D", "50% #1"],
            "exponent": [1.2049, np.nan, -0.0042],
            "n": [19, 4, 0],
            "note": ["ok", None, "{x}~^\\$"],
        }
    )


def test_booktabs_table_structure():
    tex = booktabs_table(
        _demo_frame(),
        caption="Power-law fits of tau_vs_d",
        label="tab:fits",
        columns={"fit_name": "fit", "exponent": Raw(r"exponent $\alpha$"), "n": "n_runs"},
        formats={"exponent": ".3f"},
        notes="Censored runs excluded; 95% CI",
    )
    lines = tex.splitlines()
    assert lines[0] == r"\begin{table}[htbp]"
    assert lines[-1] == r"\end{table}"
    order = [
        r"\sbox{\mbcfitbox}{%",
        r"\begin{tabular}{lrr}",
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
        r"\end{tabular}}%",
    ]
    idx = [lines.index(x) for x in order]
    assert idx == sorted(idx)
    # a table wider than the text is shrunk to it, a narrower one left as it is
    assert lines[idx[-1] + 1].startswith(r"\ifdim\wd\mbcfitbox>\linewidth\resizebox{\linewidth}")
    assert tex.count(r"\toprule") == tex.count(r"\midrule") == tex.count(r"\bottomrule") == 1
    assert r"\caption{Power-law fits of tau\_vs\_d}" in tex
    assert r"\label{tab:fits}" in tex
    header = lines[lines.index(r"\toprule") + 1]
    assert header == r"fit & exponent $\alpha$ & n\_runs \\"
    body = lines[lines.index(r"\midrule") + 1 : lines.index(r"\bottomrule")]
    assert body == [
        r"tau\_vs\_d & 1.205 & 19 \\",
        r"tau\_vs\_k \& D & -- & 4 \\",
        r"50\% \#1 & \ensuremath{-}0.004 & 0 \\",
    ]
    assert all(row.count(" & ") == 2 for row in body)
    assert r"95\% CI" in tex
    assert "{x}" not in tex and "ok" not in "".join(body)  # only the selected columns


def test_booktabs_table_defaults_missing_and_empty():
    df = _demo_frame()
    tex = booktabs_table(df, caption="c", label="tab:all")
    assert r"\begin{tabular}{lrrl}" in tex
    assert r"fit\_name & exponent & n & note \\" in tex
    assert r"\{x\}\textasciitilde{}\textasciicircum{}\textbackslash{}\$" in tex
    row = next(line for line in tex.splitlines() if line.startswith("tau\\_vs\\_k"))
    assert row.split(" & ")[1] == EN_DASH
    assert row.split(" & ")[3] == EN_DASH + r" \\"
    empty = booktabs_table(df.iloc[:0], caption="c", label="tab:empty")
    assert r"\multicolumn{4}{c}{\textit{no data}} \\" in empty


def test_booktabs_table_rejects_bad_arguments():
    df = _demo_frame()
    with pytest.raises(KeyError):
        booktabs_table(df, caption="c", label="tab:x", columns={"nope": "x"})
    with pytest.raises(KeyError):
        booktabs_table(
            df, caption="c", label="tab:x", columns={"n": "n"}, formats={"exponent": "f"}
        )
    with pytest.raises(ValueError):
        booktabs_table(df, caption="c", label="bad label")
    with pytest.raises(ValueError):
        booktabs_table(df, caption="c", label="tab:x", align="l")


# --------------------------------------------------------------------------- paper/main.tex


def _body(tex: str) -> str:
    body = tex.split(r"\begin{document}", 1)[1]
    return "\n".join(line.split("%", 1)[0] for line in body.splitlines() if "\\%" not in line)


def test_main_tex_uses_only_known_macros_and_inputs():
    tex = MAIN_TEX.read_text()
    assert r"\input{numbers.tex}" in tex
    assert tex.index(r"\input{numbers.tex}") < tex.index(r"\begin{document}")
    for name in TABLES:
        assert rf"\input{{tables/{name}.tex}}" in tex
    for name in PROSE:
        assert rf"\input{{text/{name}.tex}}" in tex
    figs = re.findall(r"\\includegraphics(?:\[[^\]]*\])?\{figures/([a-z_]+)\.pdf\}", tex)
    assert sorted(figs) == sorted(FIGURES)
    # each figure's caption is the one its drawing wrote (mbc.paper.figures.captions)
    assert sorted(re.findall(r"\\input\{figures/([a-z_]+)\.tex\}", tex)) == sorted(FIGURES)
    assert "\\caption{" not in tex.split("\\begin{figure}", 1)[1].split("\\end{figure}", 1)[0]
    body = _body(tex)
    # Generated macros are CamelCase; the prose may use only the agreed ones.
    used = set(re.findall(r"\\([A-Z][A-Za-z]*)", body))
    assert used <= set(PAPER_MACROS), used - set(PAPER_MACROS)
    assert set(VERDICTS) <= used
    assert "Reproduction status" in body


def test_main_tex_prose_types_no_numbers():
    body = _body(MAIN_TEX.read_text())
    body = re.sub(r"arXiv \d{4}\.\d{5}", "", body)  # the paper's identifier
    body = re.sub(r"\b[HER]\d+\b", "", body)  # hypothesis/experiment/robustness ids H1, E2, R1
    body = body.replace("$R^2$", "")  # notation, not a value
    body = re.sub(r"\\includegraphics\[[^\]]*\]", "", body)  # layout, not a value
    digits = [line for line in body.splitlines() if re.search(r"\d", line)]
    assert digits == [], digits


def _write_generated(gen: Path, values: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (gen / "tables").mkdir(parents=True)
    (gen / "figures").mkdir()
    (gen / "numbers.tex").write_text(numbers_tex(values, source="tests/test_latex.py"))
    df = _demo_frame()
    for name, label in TABLES.items():
        (gen / "tables" / f"{name}.tex").write_text(
            booktabs_table(
                df,
                caption=f"Dummy {name} table: 50% & co_{name}",
                label=label,
                formats={"exponent": ".3f"},
                notes="Dummy notes with $ and ~.",
            )
        )
    (gen / "text").mkdir()
    for name in PROSE:  # LaTeX special characters, as the generator writes them
        (gen / "text" / f"{name}.tex").write_text(
            f"Dummy {name}: $\\tau$ grows as $D^{{1.2}}$, 50\\%.\n"
        )
    entries = Figures.from_raw(read_yaml(REPO / "config.yaml")["figures"])
    for fig in FIGURES:
        f, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot([0, 1], [1, 0])
        ax.set_title(fig)
        f.savefig(gen / "figures" / f"{fig}.pdf")
        plt.close(f)
        # its caption with every sentence it can say: each element drawn and, with a
        # reason that needs escaping, absent
        parts = CAPTIONS[fig].parts
        drawn = Drawn(
            present={p.element for p in parts},
            absent={p.element: ["K=20 fit: 2 uncensored runs & 50% of_them"] for p in parts},
        )
        (gen / "figures" / f"{fig}.tex").write_text(caption_tex(fig, drawn, entries[fig]))


def _latexmk_or_skip() -> str:
    exe = shutil.which("latexmk")
    if exe is None or shutil.which("pdflatex") is None:
        if os.environ.get("CI"):
            pytest.fail("latexmk/pdflatex not installed but CI is set (see paper/README_TEX.md)")
        pytest.skip("latexmk/pdflatex not installed (see paper/README_TEX.md)")
    return exe


def _dummy_values(missing: bool) -> dict:
    values: dict = {name: (None if missing else 0.5) for name in PAPER_MACROS}
    values.update({"NRuns": 42, "NRunsCensored": 3, "NRunsDiverged": 1, "NExperiments": 14})
    values.update({"RunsNoun": "runs", "ExperimentsNoun": "experiments"})
    values.update({"NScorecardAgree": 5, "NScorecardRows": 9, "Preset": "smoke_test"})
    values["FitTauVsDExponent"] = -1.2e-5  # exercises the scientific notation path
    for i, v in enumerate(VERDICTS):
        values[v] = ["falsified", "supported", "inconclusive", "not enough data"][i % 4]
    if missing:
        values.update({k: None for k in values if k.startswith("Fit")})
        values["LeadFractionMean"] = float("nan")
    return values


@pytest.mark.parametrize("missing", [False, True], ids=["values", "all_fits_na"])
def test_main_tex_compiles(tmp_path, missing):
    latexmk = _latexmk_or_skip()
    gen, out = tmp_path / "gen", tmp_path / "out"
    _write_generated(gen, _dummy_values(missing))
    env = {**os.environ, "TEXINPUTS": f"{gen}{os.pathsep}"}
    cmd = [
        latexmk,
        "-pdf",
        "-interaction=nonstopmode",
        "-halt-on-error",
        f"-output-directory={out}",
        str(MAIN_TEX),
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    log_path = out / "main.log"
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:], log[-3000:])
    pdf = out / "main.pdf"
    assert pdf.exists() and pdf.stat().st_size > 1000
    assert "Undefined control sequence" not in log
    assert "LaTeX Error" not in log
    assert not re.search(r"Reference `[^']+' on page \d+ undefined", log), "undefined \\ref"
    assert not list(REPO.joinpath("paper").glob("*.aux")), "build files leaked into paper/"


@pytest.mark.parametrize("strings", ["object", "python", "pyarrow"])
def test_ci_cells_stay_latex_under_every_pandas_string_dtype(strings):
    """The `value [CI]` cells are LaTeX by their column's declaration (tables.yaml
    `latex_cells`), not by a str subclass that pandas' string dtypes turn into plain str
    (the PDF then showed `\\ensuremath{...}` as text)."""
    if strings == "pyarrow":
        pytest.importorskip("pyarrow", reason="pyarrow not installed: its string dtype untested")
    from mbc.paper.report import init_scale_tex

    table = pd.DataFrame(
        {
            "init_std": [0.05],
            "init_scale": [0.7],
            "n_runs": [3],
            "n_censored": [0],
            "tau_mean": [2.52e6],
            "tau_ci_low": [2.1e6],
            "tau_ci_high": [3e6],
            "height_over_log_k": [1.0],
            "height_ci_low": [0.99],
            "height_ci_high": [1.01],
        }
    )
    dtype = {"object": object, "python": "string[python]", "pyarrow": "string[pyarrow]"}[strings]
    with pd.option_context("future.infer_string", strings != "object"):
        tex = init_scale_tex(table.astype({"init_std": float}))
        original = pd.DataFrame.assign

        def assign_as(self, **kw):  # the cells as the string dtype under test holds them
            return original(self, **{k: pd.array(v, dtype=dtype) for k, v in kw.items()})

        pd.DataFrame.assign = assign_as
        try:
            converted = init_scale_tex(table)
        finally:
            pd.DataFrame.assign = original
    for out in (tex, converted):
        assert r"\ensuremath{2.52\times 10^{6}}" in out
        assert r"\textbackslash" not in out and r"\{" not in out

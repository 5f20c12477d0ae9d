"""hessian.csv is long (a row per checkpoint and estimator): a new estimator is one registered
function and its name in config `diagnostics.hessian.methods`; tables written wide (before
the `method` column) are read long."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.legend import Legend

from mbc import config as mbc_config
from mbc.analysis.config_sections import Statistic
from mbc.analysis.fit_tables import fit_table
from mbc.analysis.stats import statistic
from mbc.core.artifacts import write_csv_atomic
from mbc.core.config_references import ConfigError
from mbc.core.frozen import content_id, freeze
from mbc.diagnostics import config_sections, hessian
from mbc.diagnostics.config_sections import FIRST_HESSIAN_METHODS, HessianDiagnostic
from mbc.diagnostics.hessian import checkpoint_estimates, checkpoint_rows, estimator
from mbc.diagnostics.hessian_table import HESSIAN_COLUMNS, long_table, read_hessian
from mbc.diagnostics.spectrum import SpectrumEstimate
from mbc.paper import figures
from mbc.runs_pipeline import concat_tables

ROOT = Path(__file__).resolve().parents[1]

# hessian.csv's columns before the `method` column: Lanczos plain, power iteration `_power`
WIDE_COLUMNS = [
    "run_id",
    "k",
    "tau",
    "step",
    "tau_fraction",
    "phase",
    "lambda_max",
    "lambda_min",
    "residual_max",
    "residual_min",
    "converged_max",
    "converged_min",
    "anisotropy",
    "lambda_max_power",
    "lambda_min_power",
    "residual_max_power",
    "residual_min_power",
    "converged_max_power",
    "converged_min_power",
    "anisotropy_power",
    "n_iter_max_power",
    "n_iter_min_power",
]


def wide_table() -> pd.DataFrame:
    """Two checkpoints of one run, the estimators' values told apart by their size."""
    rows = []
    for step, phase in ((100, "other"), (200, "plateau")):
        lan = [50.0 + step, -0.1, 0.01, 0.02, True, False, (50.0 + step) / 0.1]
        pw = [40.0 + step, -0.2, 0.03, 0.04, False, True, (40.0 + step) / 0.2, 12, 50]
        rows.append(["r", 10, 400, step, step / 400, phase, *lan, *pw])
    return pd.DataFrame(rows, columns=WIDE_COLUMNS)


def test_a_wide_table_reads_as_one_row_per_checkpoint_and_estimator(tmp_path):
    wide = wide_table()
    long = long_table(wide)
    assert list(long.columns) == HESSIAN_COLUMNS
    assert list(zip(long.step, long.method, strict=True)) == [
        (100, "lanczos"),
        (100, "power"),
        (200, "lanczos"),
        (200, "power"),
    ]
    lan, pw = long[long.method == "lanczos"], long[long.method == "power"]
    for col in (
        "lambda_max",
        "lambda_min",
        "residual_max",
        "residual_min",
        "anisotropy",
        "converged_max",
        "converged_min",
    ):
        assert lan[col].tolist() == wide[col].tolist(), col
        assert pw[col].tolist() == wide[col + "_power"].tolist(), col
    assert pw.n_iter_max.tolist() == [12, 12] and pw.n_iter_min.tolist() == [50, 50]
    assert lan.n_iter_max.isna().all()  # Lanczos iterates both ends at once
    assert lan.phase.tolist() == ["other", "plateau"] and (long.run_id == "r").all()
    # a long table is read as it is; a header-only or empty file as a long table of no rows
    assert long_table(long) is long
    assert list(long_table(wide.iloc[:0]).columns) == HESSIAN_COLUMNS
    assert long_table(pd.DataFrame()).empty
    # from disk, and an outdir holding both layouts (a run diagnosed before, one after)
    write_csv_atomic(tmp_path / "old.csv", wide)
    write_csv_atomic(tmp_path / "new.csv", long.assign(run_id="s"))
    pd.testing.assert_frame_equal(
        read_hessian(tmp_path / "old.csv"), read_hessian(tmp_path / "new.csv").assign(run_id="r")
    )
    concat_tables([tmp_path / "old.csv", tmp_path / "new.csv"], tmp_path / "all.csv", "hessian")
    stacked = read_hessian(tmp_path / "all.csv")
    assert len(stacked) == 8 and stacked.groupby("run_id").size().tolist() == [4, 4]


def test_methods_at_their_first_default_keep_the_rerun_id():
    """The hessian jobs' rerun id (`content_id` of the section) at the estimators measured
    before config named them is the id of the section without `methods`, which those jobs
    recorded; other methods change it."""
    raw = mbc_config.read_yaml(ROOT / "config.yaml")["diagnostics"]["hessian"]
    assert tuple(raw["methods"]) == FIRST_HESSIAN_METHODS
    cfg = mbc_config.load(mbc_config.read_yaml(ROOT / "config.yaml"), {"preset": "smoke"})
    section = cfg.diagnostics.hessian
    before = dataclasses.make_dataclass(  # the section as it was, without `methods`
        "HessianDiagnostic",
        [(f.name, f.type, f) for f in dataclasses.fields(section) if f.name != "methods"],
        frozen=True,
    )
    old = before(**{f: getattr(section, f) for f in before.__dataclass_fields__})
    assert repr(section) == repr(old) and content_id(section) == content_id(old)
    other = dataclasses.replace(section, methods=("lanczos",))
    assert content_id(other) != content_id(section) and "methods=('lanczos',)" in repr(other)


# ---- a new estimator: one function, one config line -------------------------------------


def planted(k: int, n: int = 24) -> tuple:
    """A quadratic loss whose Hessian has lambda_max 40 and lambda_min -40 / (2 K^2):
    anisotropy 2 K^2 exactly."""
    rng = np.random.default_rng(k)
    eigs = np.concatenate([[-40.0 / (2 * k**2)], rng.uniform(0.5, 3.0, n - 2), [40.0]])
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = torch.from_numpy((q * eigs) @ q.T)
    x = torch.zeros(n, dtype=torch.float64, requires_grad=True)
    return (lambda: 0.5 * x @ (a @ x)), [x]


def dense(matvec, n, cfg: HessianDiagnostic, *, seed: int, device) -> SpectrumEstimate:
    """The whole matrix, column by column, and its exact extremes (for small n)."""
    h = torch.stack([matvec(e) for e in torch.eye(n, dtype=torch.float64, device=device)])
    w = torch.linalg.eigvalsh((h + h.T) / 2)
    return SpectrumEstimate(float(w[-1]), float(w[0]), 0.0, 0.0, True, True, n, "dense")


def test_a_new_estimator_is_its_name_one_function_and_one_config_line(tmp_path, monkeypatch):
    monkeypatch.setattr(hessian, "ESTIMATORS", dict(hessian.ESTIMATORS))  # undone after
    with pytest.raises(ValueError, match="declare the Hessian estimator 'dense'"):
        estimator("dense")(dense)  # a name config cannot check is refused
    known = (*config_sections.HESSIAN_ESTIMATORS, "dense")  # its name, declared once
    monkeypatch.setattr(config_sections, "HESSIAN_ESTIMATORS", known)
    estimator("dense")(dense)
    raw = mbc_config.read_yaml(ROOT / "config.yaml")
    raw["diagnostics"]["hessian"]["methods"].append("dense")  # the config line
    # and, to read it: a fit, the figure's line for it, a statistic
    raw["fits"].append(
        {"name": "anisotropy_dense_vs_k", "table": "hessian", "method": "dense", "x": "k"}
    )
    raw["figures"]["hessian"]["fits"]["dense"] = "anisotropy_dense_vs_k"
    cfg = mbc_config.load(raw, {"preset": "smoke", "outdir": str(tmp_path / "out")})
    methods = cfg.diagnostics.hessian.methods
    assert methods == ("lanczos", "power", "dense")

    rows = []
    for k in (3, 5, 10, 20):
        est = checkpoint_estimates(*planted(k), cfg.diagnostics.hessian, seed=0)
        rows += checkpoint_rows(f"run_k{k}", k, 400, 200, 0.5, "plateau", est)
    table = pd.DataFrame(rows, columns=HESSIAN_COLUMNS)
    assert table.method.tolist() == list(methods) * 4
    d = table[table.method == "dense"]
    assert d.lambda_max.to_numpy() == pytest.approx(40.0, rel=1e-12)
    assert d.anisotropy.to_numpy() == pytest.approx([2.0 * k**2 for k in (3, 5, 10, 20)])

    tau = pd.DataFrame(columns=["run_id", "experiment", "diverged"])
    hessian_fits = [f for f in cfg.fits.declared if f.table == "hessian"]
    fits = fit_table(hessian_fits, tau, table, cfg.bootstrap).set_index("name")
    assert fits.loc["anisotropy_dense_vs_k", "exponent"] == pytest.approx(2.0, abs=1e-9)
    assert fits.loc["anisotropy_dense_vs_k", "n"] == 4
    assert fits.loc[["anisotropy_vs_k", "anisotropy_power_vs_k"], "n"].tolist() == [4, 4]

    st = {
        "kind": "median",
        "table": "hessian",
        "column": "anisotropy",
        "where": {"phase": "plateau", "method": "dense", "k": 10},
        "what": "dense",
    }
    row = statistic(
        Statistic("dense_median", "median", freeze(st)), {"hessian": table}, cfg.bootstrap, set()
    )
    assert row["value"] == pytest.approx(200.0) and row["n"] == 1

    paths = {"hessian": tmp_path / "hessian.csv", "fits": tmp_path / "fits.csv"}
    write_csv_atomic(paths["hessian"], table)
    write_csv_atomic(paths["fits"], fits.reset_index())
    legend = " | ".join(render_legend("hessian", paths, tmp_path, cfg.figures["hessian"]))
    for method in methods:
        assert f"{method}, both ends converged" in legend or f"{method}, not" in legend, legend
    assert "dense fit: slope 2.000" in legend, legend


def render_legend(name: str, paths: dict, out: Path, entry) -> list[str]:
    texts = []
    original = figures.registry._save

    def capture(fig, out_pdf, out_png):
        texts.extend(t.get_text() for leg in fig.findobj(Legend) for t in leg.get_texts())
        original(fig, out_pdf, out_png)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures.registry, "_save", capture)
        figures.render(name, paths, out / f"{name}.pdf", out / f"{name}.png", entry)
    return texts


# ---- the config names estimators it has ---------------------------------------------------


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (
            lambda r: r["fits"].append({"name": "a_vs_k", "table": "hessian", "x": "k"}),
            r"fits\.\d+",
        ),
        (
            lambda r: r["fits"].append(
                {"name": "a_vs_k", "table": "hessian", "method": "dense", "x": "k"}
            ),
            r"fits\[\d+\]\.method",
        ),
        (
            lambda r: r["statistics"]["anisotropy_plateau_median"]["where"].pop("method"),
            r"statistics\.anisotropy_plateau_median\.where\.method",
        ),
        (
            lambda r: r["figures"]["hessian"]["fits"].update(dense="anisotropy_vs_k"),
            r"figures\.hessian\.fits\.dense",
        ),
        (
            lambda r: r["figures"]["hessian"]["fits"].update(power="anisotropy_vs_k"),
            r"figures\.hessian\.fits\.power",
        ),
    ],
)
def test_hessian_readers_name_a_configured_estimator(change, key):
    raw = mbc_config.read_yaml(ROOT / "config.yaml")
    change(raw)
    with pytest.raises(ConfigError) as err:
        mbc_config.load(raw, {"preset": "smoke"})
    assert re.fullmatch(key, err.value.key), str(err.value)


def test_a_misspelt_estimator_stops_the_config_at_load_naming_its_key():
    """An unknown name in `diagnostics.hessian.methods` is refused before any job runs (not
    by the Hessian job after hours of training); a declared one loads."""
    raw = mbc_config.read_yaml(ROOT / "config.yaml")
    raw["diagnostics"]["hessian"]["methods"] = ["lanczos", "lanczoz"]
    with pytest.raises(
        ConfigError, match=r"diagnostics\.hessian\.methods' = 'lanczoz'.*known: lanczos, power"
    ):
        mbc_config.load(raw, {"preset": "smoke"})
    raw["diagnostics"]["hessian"]["methods"] = ["power", "lanczos"]
    cfg = mbc_config.load(raw, {"preset": "smoke"})
    assert cfg.diagnostics.hessian.methods == ("power", "lanczos")

"""mbc.estimate on the smoke preset (given rates, so it runs in a second or two)."""

import functools
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import tiny_spec

from mbc import config as mbc_config
from mbc.estimate import calibrate_tau, estimate, main, measure_steps_per_s

CONFIG = str(Path(__file__).resolve().parents[1] / "config.yaml")


@pytest.fixture(autouse=True)
def _parse_schema_once(monkeypatch):
    # mbc.config.load re-reads the schema for every run; parse it once (test speed only)
    monkeypatch.setattr(mbc_config, "schema", functools.cache(mbc_config.schema))


def test_estimate_smoke_with_given_rate_and_law(tmp_path):
    out = estimate(
        "smoke", CONFIG, str(tmp_path), steps_per_s=100.0, tau_coef=1.0, say=lambda s: None
    )
    df = out["table"]
    assert out["runs"] == len(df) == df.run_id.nunique() > 0
    assert out["budget_steps"] == df.max_steps.sum()
    assert out["measured_taus"] == 0
    assert (df.expected_steps <= df.max_steps).all()
    transformer = df[~df.run_id.str.contains("-linear-")]
    # tau = D^1.2, early stop at 3 tau (or the budget)
    pairs = zip(transformer.d, transformer.max_steps, strict=True)
    want = [min(m, math.ceil(3 * d**1.2)) for d, m in pairs]
    assert transformer.expected_steps.tolist() == want
    assert out["wall_seconds"] >= out["cpu_seconds"] / out["jobs"] - 1e-9
    assert out["cpu_seconds"] > out["expected_steps"] / 100.0  # evaluation adds time


def test_measured_taus_override_the_law(tmp_path, capsys):
    first = estimate("smoke", CONFIG, str(tmp_path), 100.0, 1.0, say=lambda s: None)
    run_id = first["table"].run_id.iloc[0]
    pd.DataFrame([{"run_id": run_id, "tau": 7.0, "censored": False, "steps": 21}]).to_csv(
        tmp_path / "tau.csv", index=False
    )
    out = main(["--preset", "smoke", "--config", CONFIG, "--outdir", str(tmp_path),
                "--steps-per-s", "100"])  # fmt: skip
    row = out["table"].set_index("run_id").loc[run_id]
    assert out["measured_taus"] == 1 and row.expected_steps == 21
    assert out["tau_coef"] == 7.0 / row.d**1.2  # the law is calibrated on the measured tau
    assert "expected training time" in capsys.readouterr().out


def test_measurement_helpers_run():
    torch.manual_seed(0)
    spec = tiny_spec()
    assert measure_steps_per_s(spec, torch.device("cpu"), steps=3) > 0
    tau, crossed = calibrate_tau(spec, torch.device("cpu"), budget_s=0.0)
    assert tau >= 1 and isinstance(crossed, bool)

"""End to end: the smoke preset through Snakemake, checked by assertions on its outputs."""

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mbc.summary import TAU_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")

pytestmark = pytest.mark.slow


def snakemake(*args, check=True):
    cmd = [SNAKEMAKE, "--cores", "2", *args]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}")
    return res


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "results"
    snakemake("all", "--config", "preset=smoke", f"outdir={out}", f"paper_pdf={out}/paper/main.pdf")
    return out


def test_smoke_tau_table(smoke):
    tau = pd.read_csv(smoke / "tau.csv")
    assert list(tau.columns) == TAU_COLUMNS
    assert set(tau.experiment) >= {"E1", "E2"}
    assert tau.run_id.is_unique is False or len(tau) > 0
    assert (tau.d == tau.n_groups * tau.k).all()
    # censored runs have no tau; transitioned runs have one within their budget
    assert tau.loc[tau.censored, "tau"].isna().all()
    done = tau[~tau.censored]
    assert len(done) > 0 and (done.tau <= done.steps).all()
    assert (tau.height_over_log_k > 0).all()
    for run_id in tau.run_id.unique():
        m = pd.read_csv(smoke / "runs" / run_id / "metrics.csv")
        assert m.step.is_monotonic_increasing and m.step.iloc[0] == 0
        k = int(tau.loc[tau.run_id == run_id, "k"].iloc[0])
        # an untrained model does not separate the candidates: L_cand ~ log K at step 0
        assert abs(m.candidate_loss.iloc[0] - math.log(k)) < 0.35 * math.log(k)


def test_second_run_has_nothing_to_do(smoke):
    res = snakemake("all", "-n", "--config", "preset=smoke", f"outdir={smoke}",
                    f"paper_pdf={smoke}/paper/main.pdf")  # fmt: skip
    assert "Nothing to be done" in res.stdout + res.stderr


def test_bad_config_fails_before_any_job(tmp_path):
    out = tmp_path / "never"
    res = snakemake("all", "--config", "preset=smoke", f"outdir={out}", "threads=0", check=False)
    assert res.returncode != 0
    assert "config key 'threads' = 0" in res.stdout + res.stderr
    assert not out.exists()

"""benchmarks/gpu_runs.py: runs trained elsewhere (a lent device) merge into a preset's
outdir only when they are the same runs on the same data, and nothing here is lost."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_runs  # noqa: E402

from mbc.core.layout import Layout  # noqa: E402
from mbc.core.runlog import finished, read_log  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Three smoke runs trained by `gpu_runs train` (here on the CPU): one that a
    diagnostic reads, two that none does."""
    cfg = gpu_runs.load("smoke")
    diagnosed = {r for k in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(k)}
    others = [r for r in cfg.run_ids("E2") if r not in diagnosed][:2]
    assert len(others) == 2
    ids = [sorted(diagnosed)[0], *others]
    d = tmp_path_factory.mktemp("gpu")
    (d / "runs.txt").write_text("\n".join(ids) + "\n")
    rc = gpu_runs.main(["train", "--preset", "smoke", "--runs", str(d / "runs.txt"),
                        "--out", str(d / "out"), "--work", str(d / "work"), "--jobs", "1"])  # fmt: skip
    assert rc == 0
    return d / "out", ids


def test_train_returns_logs_and_a_summary(trained):
    out, ids = trained
    summary = json.loads((out / "gpu_runs.json").read_text())
    assert sorted(r["run_id"] for r in summary["runs"]) == sorted(ids)
    assert all(r["finished"] and len(r["dataset_sha256"]) == 64 for r in summary["runs"])
    assert summary["device"] == "cpu"


def test_merge_takes_finished_runs_refuses_diagnosed_ones_and_keeps_partial_ones(
    trained, tmp_path, capsys
):
    out, ids = trained
    outdir = tmp_path / "outdir"
    layout = Layout(str(outdir))
    partial = Path(layout.run(ids[1]).dir)  # a run begun here and not finished
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "log.jsonl").write_text('{"event": "start", "step": 0}\n')
    rc = gpu_runs.main(["merge", "--preset", "smoke", "--from", str(out), "--outdir", str(outdir)])
    said = capsys.readouterr().out
    assert rc == 1 and f"refused {ids[0]}: a diagnostic reads its snapshots" in said
    assert not Path(layout.run(ids[0]).dir).exists()
    for r in ids[1:]:
        log = read_log(layout.run(r).log)
        assert finished(log)
        assert [x["device"] for x in log if x.get("event") == "start"] == ["cpu"]
        assert (Path(layout.run(r).dir) / "metrics.csv").is_file()
    aside = list((outdir / "superseded").iterdir())
    assert len(aside) == 1 and aside[0].name.startswith(ids[1])
    assert (aside[0] / "state" / "log.jsonl").read_text().startswith('{"event": "start"')
    # a second merge finds them finished here and keeps them
    gpu_runs.main(["merge", "--preset", "smoke", "--from", str(out), "--outdir", str(outdir)])
    assert "2 already finished here (kept)" in capsys.readouterr().out


def test_merge_refuses_a_run_whose_data_differs(trained, tmp_path, capsys):
    out, ids = trained
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "runs.tar.gz").write_bytes((out / "runs.tar.gz").read_bytes())
    summary = json.loads((out / "gpu_runs.json").read_text())
    for r in summary["runs"]:
        r["dataset_sha256"] = "0" * 64
    (forged / "gpu_runs.json").write_text(json.dumps(summary))
    outdir = tmp_path / "outdir"
    assert gpu_runs.main(["merge", "--preset", "smoke", "--from", str(forged), "--outdir", str(outdir)]) == 1  # fmt: skip
    said = capsys.readouterr().out
    assert "0 runs taken" in said and said.count("its dataset there differs from") == 2
    assert not (outdir / "runs").exists() or not any((outdir / "runs").iterdir())

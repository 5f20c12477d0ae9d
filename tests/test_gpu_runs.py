"""benchmarks/gpu_runs.py: runs trained elsewhere (a lent device) merge into a preset's
outdir only when they are the same runs on the same data, and nothing here is lost."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_runs  # noqa: E402
import torch  # noqa: E402

from mbc.core.journal import finished, read_journal  # noqa: E402
from mbc.core.layout import Layout  # noqa: E402
from mbc.training.data import build_dataset  # noqa: E402
from mbc.training.train import train_pack  # noqa: E402


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
    rc = gpu_runs.main(
        [
            "train",
            "--preset",
            "smoke",
            "--runs",
            str(d / "runs.txt"),
            "--out",
            str(d / "out"),
            "--work",
            str(d / "work"),
            "--jobs",
            "1",
        ]
    )
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
        log = read_journal(layout.run(r).log)
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
    assert (
        gpu_runs.main(
            ["merge", "--preset", "smoke", "--from", str(forged), "--outdir", str(outdir)]
        )
        == 1
    )
    said = capsys.readouterr().out
    assert "0 runs taken" in said and said.count("its dataset there differs from") == 2
    assert not (outdir / "runs").exists() or not any((outdir / "runs").iterdir())


def _run_tables(outdir, rid) -> dict:
    """A merged run's tables, without the wall-clock columns (the one thing two trainings
    of the same run cannot share)."""
    import pandas as pd

    d = outdir if outdir.name == rid else Path(Layout(str(outdir)).run(rid).dir)
    out = {}
    for name in ("metrics.csv", "checkpoints.csv", "train_log.csv"):
        t = pd.read_csv(d / name)
        out[name] = t.drop(columns=[c for c in t.columns if "wall" in c or c == "time"])
    return out


def test_short_calls_resume_each_other_and_merge_to_the_tables_of_one_go(tmp_path, capsys):
    """Calls that stop after 150 pack steps (as a deadline would), each given the last one's
    output: every run resumes from its last resume point and the third call finishes them;
    merged call by call, every table equals the one-go training's, bitwise (fp32, CPU) but
    for the logged gradient norm (to float32 rounding). The resume state travels in
    resume.tar.gz, and a finished run is not trained again."""
    import numpy as np
    import pandas as pd

    cfg = gpu_runs.load("smoke")
    diagnosed = {r for k in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(k)}
    ids = [r for r in cfg.run_ids("E2") if r not in diagnosed][:3]
    (tmp_path / "runs.txt").write_text("\n".join(ids) + "\n")
    common = ["--preset", "smoke", "--runs", str(tmp_path / "runs.txt"), "--jobs", "1"]
    # one go: the pack `gpu_runs train` trains, here in this process
    specs = [cfg.specs[r] for r in ids]
    whole = [tmp_path / "whole" / r for r in ids]
    train_pack(
        specs,
        [build_dataset(s.task, s.seed) for s in specs],
        whole,
        torch.device("cpu"),
        say=lambda m: None,
    )

    merged, prev, resumed = tmp_path / "merged", None, []
    for call in range(1, 4):
        out = tmp_path / f"call{call}"
        args = [
            "train",
            *common,
            "--out",
            str(out),
            "--work",
            str(tmp_path / f"w{call}"),
            "--stop-after",
            "150",
        ] + (["--resume-from", str(prev)] if prev else [])
        assert gpu_runs.main(args) == 0
        summary = json.loads((out / "gpu_runs.json").read_text())
        resumed.append(sorted(r.get("resume_step", 0) for r in summary["runs"]))
        assert (
            gpu_runs.main(
                ["merge", "--preset", "smoke", "--from", str(out), "--outdir", str(merged)]
            )
            == 0
        )
        prev = out
    said = capsys.readouterr().out
    # call 1 stops all three at 150 (resume points at 100); call 2 finishes two (early
    # stops at 200 and 225) and stops the third at 250; call 3 finishes it
    assert resumed == [[100] * 3, [0, 0, 200], [0]], resumed
    assert "2 of 3 runs finished" in said and "1 of 1 runs finished" in said
    assert all(r["finished"] for r in summary["runs"])
    for rid, one_go in zip(ids, whole, strict=True):
        assert finished(read_journal(Layout(str(merged)).run(rid).log))
        a, b = _run_tables(one_go, rid), _run_tables(merged, rid)
        for name in a:
            # bitwise, but for the logged gradient norm: its per-run sum of squares over a
            # pack of another width (the third run trained on alone from step 200, in one go
            # beside a second run until 225) rounds differently
            exact = [c for c in a[name].columns if c != "grad_norm"]
            pd.testing.assert_frame_equal(a[name][exact], b[name][exact], check_exact=True)
            if "grad_norm" in a[name]:
                np.testing.assert_allclose(a[name].grad_norm, b[name].grad_norm, rtol=1e-6)
    # a fourth call finds nothing left to train
    assert (
        gpu_runs.main(
            ["train", *common, "--out", str(tmp_path / "call4"), "--resume-from", str(prev)]
        )
        == 0
    )
    assert "0 runs of smoke to train (3 finished before" in capsys.readouterr().out


def test_plan_writes_the_runs_and_the_commands_of_each_call(tmp_path, capsys):
    """`plan`: the runs no diagnostic reads, and a train command per call that keeps the
    resume state within --carry-mb (runs in flight x a run's state), the later calls
    resuming from the carried state."""
    import shlex

    cfg = gpu_runs.load("smoke")
    diagnosed = {r for k in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(k)}
    plan = tmp_path / "plan"
    per_run = max(gpu_runs.state_mb(s) for s in cfg.specs.values())
    assert (
        gpu_runs.main(
            [
                "plan",
                "--preset",
                "smoke",
                "--out",
                str(plan),
                "--slot-s",
                "60",
                "--margin-s",
                "20",
                "--carry-mb",
                str(3.5 * per_run),
            ]
        )
        == 0
    )
    runs = (plan / "runs.txt").read_text().split()
    assert set(runs) == set(cfg.specs) - diagnosed and runs
    cmds = [
        shlex.split(line.strip().replace('"$OUT"', "OUT"))[2:]
        for line in (plan / "calls.md").read_text().splitlines()
        if line.strip().startswith("python benchmarks/gpu_runs.py train")
    ]
    first, later = (gpu_runs.parser().parse_args(c) for c in cmds)
    assert first.resume_from is None and later.resume_from == ".gpu_carry"
    assert first.deadline_s == 40 and first.runs == str(plan / "runs.txt")
    assert first.width * first.jobs == 3  # 3.5 runs' state: three in flight
    assert first.carry_mb == pytest.approx(3.5 * per_run, rel=1e-5)
    assert "merge --preset smoke --from FILES" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no gpu_runs.json there"):
        gpu_runs.main(
            [
                "train",
                "--preset",
                "smoke",
                "--runs",
                str(plan / "runs.txt"),
                "--out",
                str(tmp_path / "o"),
                "--resume-from",
                str(tmp_path),
            ]
        )
    with pytest.raises(SystemExit, match="leaves no time"):
        gpu_runs.main(["plan", "--preset", "smoke", "--out", str(plan), "--slot-s", "10"])


@pytest.mark.slow  # four calls, each a process that imports torch: minutes on a loaded CPU
def test_a_call_stopped_by_its_deadline_is_finished_by_the_next(tmp_path, capsys):
    """A deadline of seconds (however far the runs got by then, which depends on the
    machine): every run either finished or comes back in resume.tar.gz, and the next call
    finishes the rest; the tables equal the one-go training's (the logged gradient norm to
    float32 rounding). A deadline already past starts nothing and carries everything on."""
    import numpy as np
    import pandas as pd

    cfg = gpu_runs.load("smoke")
    diagnosed = {r for k in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(k)}
    # an lr-grid run and the linear baseline (its own pack)
    ids = [[r for r in cfg.run_ids(e) if r not in diagnosed][0] for e in ("E6", "E13")]
    (tmp_path / "runs.txt").write_text("\n".join(ids) + "\n")
    common = ["--preset", "smoke", "--runs", str(tmp_path / "runs.txt"), "--jobs", "1"]
    specs = [cfg.specs[r] for r in ids]
    whole = [tmp_path / "whole" / r for r in ids]
    for spec, d in zip(specs, whole, strict=True):  # one go: each in its own pack (two kinds)
        train_pack(
            [spec],
            [build_dataset(spec.task, spec.seed)],
            [d],
            torch.device("cpu"),
            say=lambda m: None,
        )
    none = tmp_path / "none"
    assert gpu_runs.main(["train", *common, "--out", str(none), "--deadline-s", "0"]) == 0
    assert "0 of 2 runs finished" in capsys.readouterr().out
    first, last = tmp_path / "first", tmp_path / "last"
    assert (
        gpu_runs.main(
            ["train", *common, "--out", str(first), "--deadline-s", "3", "--resume-from", str(none)]
        )
        == 0
    )
    summary = json.loads((first / "gpu_runs.json").read_text())
    import tarfile

    with tarfile.open(first / "resume.tar.gz") as tar:
        carried = {m.name.split("/")[1] for m in tar.getmembers()}
    for r in summary["runs"]:
        assert r["finished"] or r["resume_step"] == 0 or r["run_id"] in carried, r
    assert gpu_runs.main(["train", *common, "--out", str(last), "--resume-from", str(first)]) == 0
    merged = tmp_path / "merged"
    for out in (first, last):
        gpu_runs.main(["merge", "--preset", "smoke", "--from", str(out), "--outdir", str(merged)])
    for rid, one_go in zip(ids, whole, strict=True):
        a, b = _run_tables(one_go, rid), _run_tables(merged, rid)
        for name in a:
            exact = [c for c in a[name].columns if c != "grad_norm"]
            pd.testing.assert_frame_equal(a[name][exact], b[name][exact], check_exact=True)
            if "grad_norm" in a[name]:
                np.testing.assert_allclose(a[name].grad_norm, b[name].grad_norm, rtol=1e-6)

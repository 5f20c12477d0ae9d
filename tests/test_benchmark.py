"""benchmarks/train_step.py --quick runs and reports (never asserts speed: timings on a
shared machine are not a test; ratios are printed, the numerics check must pass)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(tmp_path, *args: str) -> tuple[str, dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    out_json = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "train_step.py"),
        "--quick",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--json",
        str(out_json),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out_json.read_text())


def _check_best(res: dict, out: str) -> None:
    """The best record's structure. Which variant wins is the CPU's business (bf16 wins
    with AMX, fp32 on an AVX2 CPU): never asserted."""
    best = res["best"]
    assert {
        "variant",
        "run_steps_per_s_per_core",
        "vs_author",
        "vs_roofline_bf16",
        "vs_roofline_fp32",
    } <= set(best)
    assert best["variant"] in res["run_step_s"] and not best["variant"].startswith("roofline")
    assert best["run_steps_per_s_per_core"] > 0
    assert best["vs_roofline_bf16"] > 0 and best["vs_roofline_fp32"] > 0
    assert re.search(
        r"^best: \S+ \d+\.\d run-steps/s/core;.* the bf16 GEMM roofline; "
        r"\d+\.\d\dx the fp32 one$",
        out,
        re.M,
    ), out
    # what auto chooses on this CPU, stated
    assert re.search(
        r"^arithmetic \(auto\) on this machine: (bf16|fp32): .* -> "
        r"(packed|unpacked), (compiled|eager)$",
        out,
        re.M,
    ), out


def test_benchmark_in_seconds_reports_structure_and_numerics(tmp_path):
    """One repeat, one pack width, one K: every table and the numerics check, in seconds."""
    out, res = _bench(
        tmp_path, "--repeats", "1", "--numerics-steps", "1", "--packed-bf16", "1", "--k", "5"
    )
    assert re.search(r"^numerics: OK$", out, re.M), out
    assert res["numerics"]["ok"] is True
    assert 0 < res["numerics"]["ours_bf16"]["max_rel_diff"] < 3e-2  # bf16 is really on
    for name in ("ours/reference", "ours/roofline", "ours_bf16/ours", "ours/roofline_bf16"):
        assert re.search(rf"^ratio {re.escape(name)}\s+\d+\.\d\d\b", out, re.M), (name, out)
    assert set(res["eval"]) == {"5"} and res["widths"]["packed_bf16_R1"] == 1
    _check_best(res, out)


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("MBC_BENCH"),
    reason="the full --quick benchmark takes 2-20 min by CPU (bf16 without AMX crawls): "
    "MBC_BENCH=1 runs it; the seconds-long test above checks the same structure",
)
def test_benchmark_quick_reports_ratios_and_numerics(tmp_path):
    out, res = _bench(tmp_path)
    assert "ours = train_run's step (train.engine=fast, train.compile=False)" in out
    for name in (
        "ours/reference",
        "ours/roofline",
        "ours/plain",
        "ours_bf16/ours",
        "ours_bf16/roofline_bf16",
        "ours/roofline_bf16",
    ):
        assert re.search(rf"^ratio {re.escape(name)}\s+\d+\.\d\d\b", out, re.M), (name, out)
    for k in (5, 20, 36):
        assert re.search(rf"^eval fraction K={k}: \d+\.\d\d%", out, re.M), (k, out)
    assert re.search(r"^numerics: OK$", out, re.M), out
    # the author's model is the anchor where it is installed, and its absence is said
    if re.search(r"^author = skipped: transformer_lens did not import", out, re.M) is None:
        assert re.search(r"^author = TransformerLens 3\.", out, re.M), out
        assert re.search(r"^ratio ours/author\s+\d+\.\d\d\b", out, re.M), out
    assert res["numerics"]["ok"] is True
    assert res["numerics"]["plain"]["max_rel_diff"] < res["numerics"]["tolerance_rel"]
    assert 0 < res["numerics"]["ours_bf16"]["max_rel_diff"] < 3e-2  # bf16 is really on
    assert set(res["eval"]) == {"5", "20", "36"}
    assert all(v > 0 for v in res["ratios"].values())
    # packed bf16 (R = 1, 4 in --quick), its roofline, the matrix unit, profile and best
    assert re.search(
        r"^CPU .*; oneDNN bf16 matmul kernels: .* -> AMX (in use|NOT in use)", out, re.M
    )
    for name in ("packed_bf16_R1", "packed_bf16_R4", "roofline_bf16_R4"):
        assert re.search(rf"^{name}\s+\d+\s+\d+\.\d", out, re.M), (name, out)
    _check_best(res, out)
    assert res["widths"]["packed_bf16_R4"] == 4
    cats = res["profile"]["packed_bf16_R1"]["ms"]
    assert {"GEMM", "attention", "casts / copies", "elementwise / norm"} <= set(cats)
    assert res["roofline_check"]["gemm_ms_in_step"] > 0
    assert res["memory"]["packed_bf16_R4"]["total_mib_per_run"] > 0


def test_compare_outdirs_matches_runs_by_what_defines_them(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import compare_outdirs

    base = {
        "experiment": "E1",
        "d": 300,
        "first_target_tau": 40,
        "transition_start": 10,
        "transition_end": 90,
        "run_id": "x",
    }
    rows_a = [
        {**base, "k": 3, "seed": 0, "tau": 50, "height_over_log_k": 1.0},
        {**base, "k": 5, "seed": 0, "tau": 100, "height_over_log_k": 0.99},
    ]
    rows_b = [
        {**base, "k": 5, "seed": 0, "tau": 150, "height_over_log_k": 1.0, "run_id": "y"},
        {**base, "k": 3, "seed": 0, "tau": 50, "height_over_log_k": 1.002},
    ]
    log = tmp_path / "b" / "runs" / "y" / "state" / "log.jsonl"  # trained on a GPU, resumed here
    log.parent.mkdir(parents=True)
    log.write_text(
        '{"event": "start", "step": 0, "device": "cuda (H200)"}\n'
        '{"event": "start", "step": 50, "device": "cpu"}\n'
    )
    for name, rows in (("a", rows_a), ("b", rows_b)):
        (tmp_path / name).mkdir(exist_ok=True)
        pd.DataFrame(rows).to_csv(tmp_path / name / "tau.csv", index=False)
    m = compare_outdirs.compare(tmp_path / "a", tmp_path / "b")
    assert m.tau_equal.tolist() == [True, False]  # K = 3 equal, K = 5 not
    compare_outdirs.main([str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert "| E1, 5, 300, 0 | 100 -> 150 |" in out
    assert m.device_b.tolist() == ["-", "cuda (H200)+cpu"] and m.device_a.tolist() == ["-", "-"]
    assert out.splitlines()[3].endswith("| - -> cuda (H200)+cpu |")
    assert "tau equal in 1 of 2 runs" in out and "max abs 0.0100" in out


def test_gpu_check_runs_in_its_cpu_mode(tmp_path):
    """benchmarks/gpu_check.sh without CUDA: the smoke preset's sizes, every section."""
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--device", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert re.search(r"^python .*, torch .*, device cpu$", out, re.M), out
    for w in (1, 8, 32, 128):
        assert re.search(rf"^pack of +{w}: +\d+\.\d pack steps/s = +\d+\.\d run-steps/s", out, re.M)
    # one run alone (train_run's step), and the packs compared with it
    assert re.search(r"^one run alone: \d+\.\d steps/s", out, re.M), out
    assert re.search(r"^  pack of +8 vs one run alone: +\d+\.\dx", out, re.M), out
    assert "bf16 (one bf16 copy of the linear layers a step), eager" in out
    # the packed slice: six runs of E1, each with a tau and finished
    row = r"^ +(E\d+) +(\d+) +(\d+) +[\d.e+-]+ +([012]) +(\d+|-) +(\d+) +\d+\.\d{4}  (.+)$"
    rows = re.findall(row, out, re.M)
    assert len(rows) == 6 and {r[1] for r in rows} == {"3", "5"}, out
    assert all(r[0] == "E1" and r[4] != "-" and r[6] == "finished" for r in rows), rows
    assert "FAILED sections" not in out
    assert (tmp_path / "runs").is_dir() and len(
        list((tmp_path / "runs").glob("*/metrics.csv"))
    ) == 6
    rates = json.loads((tmp_path / "rates.json").read_text())
    assert set(rates["pack"]) == {"1", "8", "32", "128"} and set(rates["eval_s"]) == {"5", "36"}
    assert rates["single_step_s"] > 0
    assert re.search(r"^expected training wall time with pack.enabled \(max_runs \d+\)", out, re.M)


def test_gpu_check_a_failing_section_does_not_stop_the_others(capsys):
    """One device lease is one call: a section that raises is named, the next still runs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    failed, ran = [], []
    gpu_check.guarded(failed, "2c", lambda: 1 / 0)
    gpu_check.guarded(failed, "3", ran.append, "slice")
    assert failed == ["2c"] and ran == ["slice"]
    assert "ZeroDivisionError" in capsys.readouterr().err

"""mbc.estimate on the smoke preset (given rates, so it runs in a second or two)."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import tiny_spec

from mbc import config as mbc_config
from mbc.estimate import calibrate_tau, estimate, main, report
from mbc.planning.timing import measure_steps_per_s

# the live config: these tests plan the smoke and paper presets the workflow runs
CONFIG = str(Path(__file__).resolve().parents[1] / "config.yaml")


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
    specs = mbc_config.load(mbc_config.read_yaml(CONFIG), {"preset": "smoke"}).specs
    noisy = [specs[r].task.label_noise > 0 for r in transformer.run_id]
    assert any(noisy) and not all(noisy)
    # tau = D^1.2, early stop at 3 tau (or the budget); label noise: the budget (its L_cand
    # never meets the early stop's bound)
    rows = zip(transformer.d, transformer.max_steps, noisy, strict=True)
    want = [m if n else min(m, math.ceil(3 * d**1.2)) for d, m, n in rows]
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


def test_steps_per_s_counts_the_timed_steps_only(monkeypatch):
    """A clock that reads 10 s, then 12 s: the 3 timed steps (after 2 warm-up steps) took
    2 s; a pack of 4 whose step takes 0.2 s trains 4 / 0.2 run-steps a second."""
    import types

    import mbc.planning.timing

    clock = iter([10.0, 12.0])
    monkeypatch.setattr(
        mbc.planning.timing, "time", types.SimpleNamespace(perf_counter=lambda: next(clock))
    )
    assert measure_steps_per_s(tiny_spec(), torch.device("cpu"), steps=3) == 1.5
    monkeypatch.setattr(mbc.planning.timing, "time_pack_step", lambda *a, **k: {"step_s": 0.2})
    assert measure_steps_per_s(tiny_spec(), torch.device("cpu"), width=4) == pytest.approx(20.0)


def test_calibrate_tau_is_the_first_scheduled_evaluation_below_the_threshold(tmp_path):
    """tiny_spec on a CPU: L_cand / log K is 0.97 at step 20 and 0.22 at 40 (the log's tau,
    30, comes from dense evaluations the calibration does not make). Out of time, the
    first evaluation (step 1) ends it; a budget of 20 steps never crosses."""
    import dataclasses

    from mbc.core.crossing import first_crossing
    from mbc.training.data import build_dataset
    from mbc.training.schedule import eval_schedule
    from mbc.training.train import train_run

    spec, cpu = tiny_spec(), torch.device("cpu")
    m = train_run(spec, build_dataset(spec.task, spec.seed), tmp_path, cpu, say=lambda s: None)
    sched = m[m.step.isin(eval_schedule(spec.eval, spec.train.max_steps)[0])]
    limit = spec.eval.threshold * spec.task.log_k
    assert first_crossing(sched.step.tolist(), sched.candidate_loss.tolist(), limit) == 40
    assert calibrate_tau(spec, cpu, budget_s=1e9) == (40, True)
    assert calibrate_tau(spec, cpu, budget_s=0.0) == (1, False)
    short = dataclasses.replace(spec, train=dataclasses.replace(spec.train, max_steps=20))
    assert calibrate_tau(short, cpu, budget_s=1e9) == (20, False)


def test_banner_counts_runs_and_warns_for_the_paper_preset_on_a_cpu(tmp_path):
    import torch
    import yaml

    from mbc import config as mbc_config
    from mbc.planning.banner import banner_lines

    raw = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())
    smoke = mbc_config.load(raw, {"preset": "smoke", "outdir": str(tmp_path)})
    first = next(iter(smoke.specs))
    # trained: its log says finished (a summary.json alone is not training)
    (tmp_path / "runs" / first / "state").mkdir(parents=True)
    (tmp_path / "runs" / first / "state" / "log.jsonl").write_text('{"event": "done", "step": 1}\n')
    second = list(smoke.specs)[1]
    (tmp_path / "runs" / second).mkdir(parents=True)
    (tmp_path / "runs" / second / "summary.json").write_text("{}")
    lines = banner_lines(smoke, cores=2, measure=False)
    n = len(smoke.specs)
    assert f"{n} distinct runs: 1 trained, {n - 1} to train" in lines[1]
    assert any("an upper bound" in line for line in lines)  # no tau measured yet
    assert not any("resume point" in line for line in lines)
    # a run killed after its resume point at step 20 continues from there (its last mark),
    # but only with the resume file: without it the run starts again from 0
    marks = [{"event": "resume", "step": s, "sha256": "x"} for s in (10, 20)]
    state = tmp_path / "runs" / second / "state"
    state.mkdir()
    (state / "log.jsonl").write_text("".join(json.dumps(m) + "\n" for m in marks))
    (steps,) = [x for x in banner_lines(smoke, cores=2, measure=False) if "steps expected" in x]
    assert "resume point" not in steps
    (state / "resume.pt").write_bytes(b"")
    (steps,) = [x for x in banner_lines(smoke, cores=2, measure=False) if "steps expected" in x]
    assert "; 20 of them done: 1 run(s) continue from a resume point)" in steps
    assert any("disk for the runs left to train: at most" in line for line in lines)
    assert not any("WARNING" in line for line in lines)
    if not torch.cuda.is_available():
        paper = mbc_config.load(raw, {"outdir": str(tmp_path / "p")})
        assert any("WARNING" in line and "preset=quick" in line
                   for line in banner_lines(paper, cores=8, measure=False))  # fmt: skip


def _rates(step_s: dict[int, float], eval_s=(0.0, 0.0)) -> dict:
    return {
        "device": "planted",
        "shape": {"model": [2, 2, 32, 64], "batch_size": 16, "seq_len": 16, "precision": "fp32"},
        "pack": {str(w): {"step_s": t} for w, t in step_s.items()},
        "eval_s": {"5": eval_s[0], "36": eval_s[1]},
    }


def test_a_pack_costs_its_widths_times_its_steps():
    """Planted rates: three runs of 100, 200 and 400 steps take 100 steps at width 3, 100
    at width 2 and 200 at width 1; evaluations add n x eval_s(K), linear in K."""
    from mbc.planning.timing import eval_seconds, pack_seconds, step_seconds

    spec = tiny_spec()  # batch 16, the planted shape's tokens per step
    rates = _rates({1: 1.0, 8: 1.7}, eval_s=(0.5, 3.6))
    assert step_seconds(rates, 2, spec) == pytest.approx(1.1)  # interpolated in R
    assert step_seconds(rates, 16, spec) == pytest.approx(1.7 * 2)  # per run beyond the widest
    assert eval_seconds(rates, 10) == pytest.approx(0.5 + 5 * 0.1)
    secs = pack_seconds([spec] * 3, [200, 100, 400], [0, 0, 0], rates)
    assert secs == pytest.approx(100 * 1.2 + 100 * 1.1 + 200 * 1.0)
    assert pack_seconds([spec], [10], [4], rates) == pytest.approx(10 + 4 * eval_seconds(rates, 3))


def test_estimate_with_pack_rates_reports_the_packed_wall_time(tmp_path, capsys):
    import json

    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(_rates({1: 0.01, 8: 0.012, 32: 0.02, 128: 0.05})))
    out = estimate("smoke", CONFIG, str(tmp_path), tau_coef=1.0, rates_path=str(rates))
    p = out["packed"]
    said = capsys.readouterr().out
    assert sum(n for _, n, _ in p["packs"]) == sum("-linear-" not in r for r in out["table"].run_id)
    assert p["wall_s"] == pytest.approx(sum(s for _, _, s in p["packs"]) + p["alone_s"])
    assert "expected training wall time with pack.enabled (max_runs 256)" in said
    # a censored run measured in tau.csv (no tau): its evaluations are counted, not NaN
    censored = out["table"].run_id.iloc[0]
    pd.DataFrame([{"run_id": censored, "tau": None, "censored": True, "steps": 300}]).to_csv(
        tmp_path / "tau.csv", index=False
    )
    again = estimate("smoke", CONFIG, str(tmp_path), tau_coef=1.0, rates_path=str(rates))
    row = again["table"].set_index("run_id").loc[censored]
    assert row.expected_steps == 300 and pd.isna(row.tau)  # censored: its budget, no tau
    assert math.isfinite(again["packed"]["wall_s"])
    assert again["packed"]["wall_s"] > p["wall_s"]  # its 300 steps count: more than 3 tau


def test_estimate_on_cuda_without_cuda_is_one_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="^mbc.estimate: device='cuda' requested but CUDA"):
        main(["--preset", "smoke", "--config", CONFIG, "--device", "cuda"])


def test_a_shape_is_timed_once_per_machine_even_by_dry_runs(tmp_path, monkeypatch):
    """A dry run writes nothing into the outdir, yet its timing is kept outside it: the
    next dry run, and the first real run, of the same shape time nothing."""
    import mbc.planning.timing
    from mbc.planning import banner

    calls = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(
        mbc.planning.timing, "measure_steps_per_s", lambda *a, **k: calls.append(1) or 42.0
    )
    outdir_cache = tmp_path / "out" / ".mbc" / "steps_per_s.json"
    for _ in range(2):  # two dry runs
        assert banner.cached_rate(tiny_spec(), "cpu", 1, outdir_cache, write=False) == 42.0
    assert len(calls) == 1 and not outdir_cache.exists()
    assert banner.machine_rates() == tmp_path / "cache" / "mbc" / "steps_per_s.json"
    assert banner.cached_rate(tiny_spec(), "cpu", 1, outdir_cache, write=True) == 42.0
    assert len(calls) == 1 and list(json.loads(outdir_cache.read_text()).values()) == [42.0]
    assert banner.cached_rate(tiny_spec(), "cpu", 1, outdir_cache, width=4) == 42.0
    assert len(calls) == 2, "another width is another measurement"


def test_estimate_for_a_gpu_from_its_rates_calibrates_tau_on_this_cpu(tmp_path, capsys):
    """--device cuda with a rates file and no --tau-coef, on a machine without CUDA: the
    law's coefficient (in steps) is calibrated here, on the CPU, and said so."""
    import json

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(_rates({1: 0.01, 8: 0.012, 32: 0.02, 128: 0.05})))
    out = estimate("smoke", CONFIG, str(tmp_path), calibrate_s=20, rates_path=str(rates),
                   device="cuda")  # fmt: skip
    said = capsys.readouterr().out
    assert "calibrating tau on cpu" in said
    assert out["tau_coef"] > 0 and "on cpu" in out["tau_coef_note"]
    assert out["device"] == "cuda" and math.isfinite(out["packed"]["wall_s"])


def test_a_second_estimate_measures_nothing_and_counts_a_shared_run_once(
    tmp_path, monkeypatch, capsys
):
    """The estimate says what it measures while it does, caches its calibration and its
    rates per machine (the banner's rate cache: one figure per shape), and counts a run two
    experiments list in each of their rows but once in `all`."""
    import mbc.estimate as est
    import mbc.planning.timing

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = {"tau": 0, "rate": 0}

    def fake_tau(spec, device, cap):
        calls["tau"] += 1
        return 100, True

    def fake_rate(*a, **k):
        calls["rate"] += 1
        return 50.0

    monkeypatch.setattr(est, "calibrate_tau", fake_tau)
    monkeypatch.setattr(mbc.planning.timing, "measure_steps_per_s", fake_rate)
    first = estimate("smoke", CONFIG, str(tmp_path / "a"))
    said = capsys.readouterr().out
    assert calls["tau"] == 1 and calls["rate"] >= 1
    assert "calibrating tau on cpu" in said and "timing 20 training steps of" in said
    timed = calls["rate"]
    # another outdir, the same machine: nothing trained, nothing timed
    again = estimate("smoke", CONFIG, str(tmp_path / "b"))
    said = capsys.readouterr().out
    assert calls == {"tau": 1, "rate": timed}
    assert "timing" not in said and again["expected_steps"] == first["expected_steps"]
    report(again)
    said = capsys.readouterr().out
    (all_row,) = [line for line in said.splitlines() if line.startswith("all ")]
    assert int(all_row.split()[1]) == again["runs"]  # each distinct run once
    assert "are listed by two or more experiments" in said and "E15 + E2 1" in said


def test_the_banner_uses_the_estimates_calibration_where_no_tau_is_measured(tmp_path, monkeypatch):
    """Without a measured tau the banner costed every run at its budget while the estimate
    calibrated a law (9.1 against 5.8 days for one preset): it now reads that calibration."""
    import mbc.estimate as est
    from mbc.planning.banner import banner_lines

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = mbc_config.load(
        mbc_config.read_yaml(CONFIG), {"preset": "smoke", "outdir": str(tmp_path)}
    )
    before = banner_lines(cfg, cores=2, measure=False)
    assert any("every run at its full budget" in line for line in before)
    monkeypatch.setattr(est, "calibrate_tau", lambda spec, device, cap: (40, True))
    estimate("smoke", CONFIG, str(tmp_path), steps_per_s=50.0)
    after = banner_lines(cfg, cores=2, measure=False)
    (law,) = [line for line in after if "tau = c D^" in line]
    assert "c from the calibration run" in law

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
from mbc.planning.cost import FIRST_TARGET_RATIO
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
    on_log = [specs[r].train.early_stop_series == "train_log" for r in transformer.run_id]
    assert any(noisy) and not all(noisy) and any(on_log)
    t = [specs[r].train for r in transformer.run_id]
    first = [x.early_stop_first_target or x.early_stop_first_target_log for x in t]
    assert any(first)  # E7 waits for its first-target crossings
    # tau = D^1.2, early stop at 3 tau (or the budget); one that waits for a first-target
    # crossing (E7; E12's training-log series) at 3 x FIRST_TARGET_RATIO tau, noise or not;
    # one without an early stop (E14_author) at its budget
    waits = [log or f for log, f in zip(on_log, first, strict=True)]
    stops = [x.early_stop_tau_factor > 0 for x in t]
    assert not all(stops)
    rows = zip(transformer.d, transformer.max_steps, waits, stops, strict=True)
    ratio = {True: FIRST_TARGET_RATIO, False: 1.0}
    want = [min(m, math.ceil(3 * ratio[w] * d**1.2)) if s else m for d, m, w, s in rows]
    assert transformer.expected_steps.tolist() == want
    assert out["wall_seconds"] >= out["cpu_seconds"] / out["jobs"] - 1e-9
    assert out["cpu_seconds"] > out["expected_steps"] / 100.0  # evaluation adds time


def test_measured_taus_override_the_law(tmp_path, capsys):
    first = estimate("smoke", CONFIG, str(tmp_path), 100.0, 1.0, say=lambda s: None)
    run_id = first["table"].run_id.iloc[0]
    pd.DataFrame([{"run_id": run_id, "tau": 7.0, "censored": False, "steps": 21}]).to_csv(
        tmp_path / "tau.csv", index=False
    )
    out = main(
        ["--preset", "smoke", "--config", CONFIG, "--outdir", str(tmp_path), "--steps-per-s", "100"]
    )
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


def test_the_calibration_trains_eager_and_a_lower_bound_says_at_least(monkeypatch, tmp_path):
    """A run that compiles is calibrated eager (a cold compile had eaten a 60 s budget); a
    calibration that did not cross makes every total a lower bound, and the report says so."""
    import dataclasses

    import mbc.estimate as est

    seen = []
    real = est.PackedRuns
    monkeypatch.setattr(
        est, "PackedRuns", lambda specs, *a, **k: seen.append(specs[0]) or real(specs, *a, **k)
    )
    spec = tiny_spec()
    compiled = dataclasses.replace(spec, train=dataclasses.replace(spec.train, compile=True))
    assert calibrate_tau(compiled, torch.device("cpu"), budget_s=1e9) == (40, True)
    assert [s.train.compile for s in seen] == [False]
    said = []
    monkeypatch.setattr(est, "cached_calibration", lambda *a: (5, False))
    out = estimate("smoke", CONFIG, str(tmp_path), steps_per_s=100.0, say=said.append)
    assert out["lower_bound"] and "LOWER BOUND" in out["tau_coef_note"]
    assert any(line.startswith("expected training time: at least ") for line in said), said
    assert any("c is a lower bound" in line for line in said)


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
        assert any(
            "WARNING" in line and "preset=quick" in line
            for line in banner_lines(paper, cores=8, measure=False)
        )


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


def test_packs_side_by_side_share_the_device_in_proportion():
    """Planted stretches: a pack that fills the device (u = 1, 10 s alone) beside one that
    uses a quarter (4 s): together they ask 1.25, so both run at 0.8 of their pace until the
    small one ends at 4 / 0.8 = 5 s; the big one has 6 s left, alone: it ends at 11 s. One
    slot, or memory for one only: one after another, the higher priority first."""
    from mbc.planning.timing import concurrent_schedule

    big, small = ("big", 4, [(10.0, 1.0)], 10.0, 2), ("small", 1, [(4.0, 0.25)], 5.0, 1)
    ends = lambda placed: {p.pack_id: (p.start_s, p.end_s) for p in placed}  # noqa: E731
    assert ends(concurrent_schedule([small, big], 2, None)) == {
        "big": (0, pytest.approx(11.0)),
        "small": (0, pytest.approx(5.0)),
    }
    serial = {"big": (0, pytest.approx(10.0)), "small": (pytest.approx(10.0), pytest.approx(14.0))}
    assert ends(concurrent_schedule([small, big], 1, None)) == serial
    assert ends(concurrent_schedule([small, big], 2, 12.0)) == serial
    # the priority, not the length, decides who waits
    first = ("small", 1, [(4.0, 0.25)], 5.0, 3)
    assert ends(concurrent_schedule([first, big], 1, None)) == {
        "small": (0, pytest.approx(4.0)),
        "big": (pytest.approx(4.0), pytest.approx(14.0)),
    }
    # two that together leave room: each at its own pace
    two = [("a", 1, [(3.0, 0.25), (2.0, 0.5)], 1.0, 0), ("b", 1, [(4.0, 0.25)], 1.0, 0)]
    assert ends(concurrent_schedule(two, 2, None)) == {
        "a": (0, pytest.approx(5.0)),
        "b": (0, pytest.approx(4.0)),
    }


def test_the_linear_pack_beside_a_transformer_pack_from_planted_rates():
    """Planted rates 0.01 s a step alone, 0.02 s for 8 runs: the device's best is 400
    run-steps/s, one run uses 100 / 400 = 0.25 of it, two 175 / 400. A transformer pack
    of two runs (100 and 200 steps: 100 at width 2, 100 at width 1) and the linear
    baseline's pack of one run (300 steps, the reference's one-run step, unscaled; its
    fraction by its work) ask less than 1 together: each takes its time alone; the linear
    one, 3 s, ends last."""
    import dataclasses

    from mbc.planning.timing import packed_wall_seconds, utilization

    rates = _rates({1: 0.01, 8: 0.02})
    t = tiny_spec()
    lin = dataclasses.replace(t, model=dataclasses.replace(t.model, kind="linear"))
    specs = {"t0": t, "t1": dataclasses.replace(t, seed=1), "lin": lin}
    steps = {"t0": 100, "t1": 200, "lin": 300}
    assert utilization(rates, 1) == pytest.approx(0.25)
    assert utilization(rates, 2) == pytest.approx(2 / (0.01 + 0.01 / 7) / 400)
    # the linear run's fraction: its work (one-hot [B; z] x 512 + 512 x the targets, x batch
    # 16) over the tiny transformer's (weights x 16 x 16 tokens)
    ratio = (8 * 40 + 5 * 40) * 512 * 16 / ((2 * (4 * 32**2 + 2 * 32 * 64) + 2 * 40 * 32) * 256)
    assert utilization(rates, 1, lin) == pytest.approx(0.25 * ratio)
    together = packed_wall_seconds(specs, steps, dict.fromkeys(specs, 0), rates, 8, slots=2)
    t_pack = 100 * (0.01 + 0.01 / 7) + 100 * 0.01
    assert sorted(s for _, _, s in together["packs"]) == pytest.approx([t_pack, 3.0])
    assert together["wall_s"] == pytest.approx(3.0)
    assert together["serial_s"] == pytest.approx(t_pack + 3.0)
    width2 = 100 * (0.01 + 0.01 / 7) * utilization(rates, 2)
    assert together["device_s"] == pytest.approx(width2 + 1.0 * 0.25 + 3.0 * 0.25 * ratio)
    alone = packed_wall_seconds(specs, steps, dict.fromkeys(specs, 0), rates, 8, slots=1)
    assert alone["wall_s"] == pytest.approx(alone["serial_s"])
    # measured linear pack steps (`linear_pack`) replace the transformer's for linear runs
    rates["linear_pack"] = {"1": {"step_s": 0.002}, "8": {"step_s": 0.004}}
    own = packed_wall_seconds(specs, steps, dict.fromkeys(specs, 0), rates, 8, slots=2)
    assert sorted(s for _, _, s in own["packs"]) == pytest.approx([300 * 0.002, t_pack])


def test_a_packs_estimated_memory_is_near_the_measured_h200_peak():
    """A training step's memory (`run_memory_gb` less the kept weight copies) at the shape
    gpu_check measured: within 25% of the measured growth of the peak memory per run between
    packs of 32 and 128 (benchmarks/results); the kept copies add the weights' size each."""
    from mbc.planning.cost import n_parameters, run_memory_gb, training_memory_gb
    from mbc.planning.timing import shape_of

    measured = json.loads(
        (Path(CONFIG).parent / "benchmarks/results/h200-2026-12-04/rates.json").read_text()
    )
    cfg = mbc_config.load(mbc_config.read_yaml(CONFIG), {"preset": "paper"})
    spec = next(s for s in cfg.specs.values() if shape_of(s) == measured["shape"])
    p = measured["pack"]
    per_run = (p["128"]["peak_mem_gb"] - p["32"]["peak_mem_gb"]) / 96
    assert training_memory_gb(spec) == pytest.approx(per_run, rel=0.25)
    kept = spec.eval.every // spec.eval.dense_every - 1
    extra = run_memory_gb(spec) - training_memory_gb(spec)
    assert extra == pytest.approx(kept * 4 * n_parameters(spec) / 2**30)


def test_estimate_with_pack_rates_reports_the_packed_wall_time(tmp_path, capsys):
    import json

    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(_rates({1: 0.01, 8: 0.012, 32: 0.02, 128: 0.05})))
    out = estimate("smoke", CONFIG, str(tmp_path), tau_coef=1.0, rates_path=str(rates))
    p = out["packed"]
    said = capsys.readouterr().out
    # every run packs, the linear baseline's too (its own pack)
    assert sum(n for _, n, _ in p["packs"]) == len(out["table"]) and p["alone_s"] == 0
    assert any(pid.startswith("linear") for pid, _, _ in p["packs"])
    assert p["serial_s"] == pytest.approx(sum(s for _, _, s in p["packs"]))
    longest = max(s for _, _, s in p["packs"])
    assert longest <= p["wall_s"] <= p["serial_s"]  # side by side: never slower
    assert "expected training wall time with pack.enabled (max_runs 256)" in said
    assert "side by side (up to 8 train_pack jobs, memory not checked" in said
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
    # the step's code changed (its modules' hash): a rate of the old code is not reused
    monkeypatch.setattr(banner, "step_code_id", lambda: "changed")
    assert banner.cached_rate(tiny_spec(), "cpu", 1, outdir_cache, write=True) == 42.0
    assert len(calls) == 3, "the older code's rate was reused"


def test_the_step_code_id_follows_the_step_modules(tmp_path, monkeypatch):
    """`step_code_id` hashes the files of STEP_MODULES: one byte changed in any, another id."""
    import shutil

    import mbc.training
    from mbc.planning import banner

    root = Path(mbc.training.__file__).parent
    copy = tmp_path / "training"
    copy.mkdir()
    for name in banner.STEP_MODULES:
        shutil.copy(root / f"{name}.py", copy)
    monkeypatch.setattr(mbc.training, "__file__", str(copy / "__init__.py"))
    before = banner.step_code_id()
    assert before == banner.step_code_id()
    (copy / "forward.py").write_text((copy / "forward.py").read_text() + "\n# changed\n")
    assert banner.step_code_id() != before


def test_estimate_for_a_gpu_from_its_rates_calibrates_tau_on_this_cpu(tmp_path, capsys):
    """--device cuda with a rates file and no --tau-coef, on a machine without CUDA: the
    law's coefficient (in steps) is calibrated here, on the CPU, and said so."""
    import json

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(_rates({1: 0.01, 8: 0.012, 32: 0.02, 128: 0.05})))
    out = estimate(
        "smoke", CONFIG, str(tmp_path), calibrate_s=20, rates_path=str(rates), device="cuda"
    )
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


def test_measured_rates_time_the_linear_baselines_packs_when_given_one():
    import dataclasses

    from mbc.planning.timing import measure_rates, step_seconds

    t = tiny_spec()
    lin = dataclasses.replace(t, model=dataclasses.replace(t.model, kind="linear"))
    rates = measure_rates(
        t,
        torch.device("cpu"),
        widths=(1, 2),
        eval_ks=(3,),
        steps=2,
        eval_width=2,
        say=lambda m: None,
        linear=lin,
    )
    assert sorted(rates["linear_pack"]) == ["1", "2"]
    assert step_seconds(rates, 2, lin) == rates["linear_pack"]["2"]["step_s"]
    assert "linear_pack" not in measure_rates(
        t, torch.device("cpu"), widths=(1,), eval_ks=(3,), steps=2, eval_width=2, say=lambda m: None
    )

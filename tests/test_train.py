import math
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import fixture_config, tiny_spec

from mbc.training.data import BatchOrder, build_dataset
from mbc.training.metrics import training_loss
from mbc.training.model import build_model
from mbc.training.schedule import eval_schedule, schedule
from mbc.training.train import train_run

CPU = torch.device("cpu")


def first_step_loss(spec):
    ds = build_dataset(spec.task, spec.seed)
    from mbc.training.data import STREAM_INIT, stream_seed

    model = build_model(
        spec.model, spec.task, torch.Generator().manual_seed(stream_seed(spec.seed, STREAM_INIT))
    )
    idx = BatchOrder(ds.tokens.shape[0], spec.train.batch_size, spec.seed, CPU).indices(1)
    return float(training_loss(model, ds.tokens[idx]).detach())


def test_same_seed_same_first_step_loss_different_seed_differs():
    a = tiny_spec()
    b = tiny_spec()
    c = type(a)(task=a.task, model=a.model, train=a.train, eval=a.eval, seed=1)
    assert first_step_loss(a) == first_step_loss(b)
    assert first_step_loss(a) != first_step_loss(c)


def test_batches_without_replacement_within_each_epoch():
    order = BatchOrder(d=36, batch_size=8, seed=3, device=CPU)
    stream = torch.cat([order.indices(s) for s in range(1, 19)])  # 144 = 4 epochs
    for e in range(4):
        assert sorted(stream[e * 36 : (e + 1) * 36].tolist()) == list(range(36))
    assert not torch.equal(stream[:36], stream[36:72]), "a fresh permutation each epoch"


def test_schedule_dense_early_and_uniform():
    # 0, ten log-spaced points 10^(3i/9) rounded (1, 2.15, 4.64, 10, 21.5, 46.4, ...) and
    # the multiples of 250
    s = schedule(1000, every=250, n_log=10)
    assert s == [0, 1, 2, 5, 10, 22, 46, 100, 215, 250, 464, 500, 750, 1000]
    evals, snaps = eval_schedule(tiny_spec().eval, 120)
    assert set(snaps) <= set(evals)


def _metrics(run_dir):
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=["wall_s"])


def test_interrupted_run_resumes_bitwise(tmp_path):
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    full = tmp_path / "full"
    train_run(spec, ds, full, CPU, say=lambda s: None)
    cut = tmp_path / "cut"
    train_run(spec, ds, cut, CPU, say=lambda s: None, stop_after=70)  # killed at step 70
    assert not (cut / "metrics.csv").exists()
    messages = []
    train_run(spec, ds, cut, CPU, say=messages.append)
    assert any("resuming" in m and "from step 60" in m for m in messages)
    pd.testing.assert_frame_equal(_metrics(full), _metrics(cut))
    assert (
        pd.read_csv(full / "checkpoints.csv")["sha256"].tolist()
        == pd.read_csv(cut / "checkpoints.csv")["sha256"].tolist()
    )


def test_corrupt_resume_file_is_detected_and_run_restarts(tmp_path):
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    run = tmp_path / "run"
    train_run(spec, ds, run, CPU, say=lambda s: None, stop_after=50)
    resume = run / "state" / "resume.pt"
    resume.write_bytes(resume.read_bytes()[: resume.stat().st_size // 2])  # truncated
    messages = []
    train_run(spec, ds, run, CPU, say=messages.append)
    assert any("checksum mismatch" in m and "from step 0" in m for m in messages)
    ref = tmp_path / "ref"
    train_run(spec, ds, ref, CPU, say=lambda s: None)
    pd.testing.assert_frame_equal(_metrics(ref), _metrics(run))


def test_torn_log_line_is_ignored(tmp_path):
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    run = tmp_path / "run"
    train_run(spec, ds, run, CPU, say=lambda s: None, stop_after=50)
    with open(run / "state" / "log.jsonl", "a") as fh:
        fh.write('{"step": 51, "loss": 0.1')  # killed mid-write
    train_run(spec, ds, run, CPU, say=lambda s: None)
    # the torn line is dropped with everything after the resume point: the run's tables
    # are an uninterrupted run's, bit for bit
    ref = tmp_path / "ref"
    train_run(spec, ds, ref, CPU, say=lambda s: None)
    pd.testing.assert_frame_equal(_metrics(ref), _metrics(run))


@pytest.mark.parametrize("direction,kind", [("a_to_b", "transformer"), ("bz_to_a", "linear")])
def test_variants_train(tmp_path, direction, kind):
    """The reverse task and the linear baseline train: on the tiny task both fit it (the
    candidate loss falls tenfold; at paper scale the linear one cannot, E13). Only the
    reverse task has no delta_z (z is redundant there), and the linear network starts with
    near-equal logits, so at step 0 its candidate loss is log K."""
    import dataclasses

    spec = tiny_spec(direction=direction)
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, kind=kind))
    m = train_run(spec, build_dataset(spec.task, 0), tmp_path, CPU, say=lambda s: None)
    lcand = m["candidate_loss"]
    assert lcand.notna().all() and (lcand >= 0).all() and m["step"].is_unique
    assert m["delta_z"].isna().all() == (direction == "a_to_b")
    assert lcand.iloc[-1] < lcand.iloc[0] / 10
    assert m["train_loss"].iloc[-1] < m["train_loss"].iloc[1] / 10
    if kind == "linear":
        assert abs(lcand.iloc[0] - math.log(spec.task.k)) < 0.05


def _with_train(spec, **kw):
    import dataclasses

    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **kw))


def test_train_engine_selects_the_implementation(tmp_path, monkeypatch):
    """`fast` evaluates with the shared prefix, `plain` every candidate sequence in full
    (the trainer evaluates with the engine config names); `fast` is the default; an
    unknown engine is refused naming the key, before anything is written."""
    from mbc.training import metrics

    spec = tiny_spec()
    assert spec.train.engine == "fast" and spec.train.compile is False
    assert metrics.ENGINES["fast"] is metrics.evaluate_shared_prefix
    assert metrics.ENGINES["plain"] is metrics.evaluate
    ds = build_dataset(spec.task, 0)
    used = []
    for name in ("fast", "plain"):
        real = metrics.ENGINES[name]
        monkeypatch.setitem(
            metrics.ENGINES, name, lambda m, b, f=real, n=name: used.append(n) or f(m, b)
        )
    plain = _with_train(spec, engine="plain", max_steps=20)
    train_run(plain, ds, tmp_path / "p", CPU, say=lambda s: None)
    assert used and set(used) == {"plain"}
    with pytest.raises(ValueError, match="train.engine"):
        train_run(_with_train(spec, engine="turbo"), ds, tmp_path / "t", CPU, say=lambda s: None)
    assert not (tmp_path / "t").exists()


def test_fast_and_plain_engines_train_the_same_run(tmp_path):
    """Same seed, same batches: every logged metric agrees to float32 rounding.

    Tolerance: relative 1e-4 (absolute 1e-5 for values near zero, e.g. delta_z early on);
    measured after 120 steps: relative <= 8e-6 on losses and grad norm, absolute 2e-6 on
    delta_z, accuracy equal.
    """
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    runs = {}
    for name in ("fast", "plain"):
        s = _with_train(spec, engine=name)
        assert s.run_id == spec.run_id  # an implementation choice, not a new run
        runs[name] = train_run(s, ds, tmp_path / name, CPU, say=lambda m: None)
    fast, plain = runs["fast"], runs["plain"]
    assert fast["step"].tolist() == plain["step"].tolist()
    assert len(fast) > 5
    cols = ["train_loss", "grad_norm", "loss", "first_target_loss", "candidate_loss"]
    cols += ["candidate_accuracy", "shuffled_loss", "delta_z"]
    for c in cols:
        a, b = fast[c].to_numpy(), plain[c].to_numpy()
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True), (c, a - b)
    assert plain["candidate_loss"].iloc[-1] < 0.5 * plain["candidate_loss"].iloc[0]  # it learnt


@pytest.mark.slow  # a cold torch.compile takes 1-2 minutes on a loaded 2-core machine
@pytest.mark.skipif(
    not (shutil.which("cc") or shutil.which("gcc")),
    reason="torch.compile on CPU needs a C compiler",
)
def test_compiled_loss_trains_the_same_run_and_resumes_bitwise(tmp_path):
    """train.compile: true agrees with eager to float32 rounding; resuming is bitwise."""
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    eager = train_run(spec, ds, tmp_path / "eager", CPU, say=lambda m: None)
    compiled = _with_train(spec, compile=True)
    full = train_run(compiled, ds, tmp_path / "full", CPU, say=lambda m: None)
    for c in ["train_loss", "grad_norm", "loss", "candidate_loss", "delta_z"]:
        a, b = full[c].to_numpy(), eager[c].to_numpy()
        assert np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True), (c, a - b)
    train_run(compiled, ds, tmp_path / "cut", CPU, say=lambda m: None, stop_after=70)
    torch._dynamo.reset()  # as a fresh process would: compile again
    train_run(compiled, ds, tmp_path / "cut", CPU, say=lambda m: None)
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "cut"))


def _with_eval(spec, **kw):
    import dataclasses

    return dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, **kw))


def test_learning_rate_schedules_match_their_closed_form():
    import math

    from mbc.training.schedule import learning_rate

    const = tiny_spec().train
    assert [learning_rate(const, s) for s in (1, 50, 120)] == [const.lr] * 3
    t = _with_train(tiny_spec(), schedule="warmup_cosine", warmup_steps=500, max_steps=30_000).train
    lr = t.lr
    # HF get_cosine_schedule_with_warmup: factor at count c = step - 1
    assert learning_rate(t, 1) == 0.0
    assert learning_rate(t, 251) == pytest.approx(lr * 250 / 500)
    assert learning_rate(t, 501) == pytest.approx(lr)  # warmup done, cosine at 0
    mid = 500 + (30_000 - 500) // 2
    assert learning_rate(t, mid + 1) == pytest.approx(lr * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(t, 30_001) == pytest.approx(0.0, abs=1e-15)
    c = 10_000
    want = lr * 0.5 * (1 + math.cos(math.pi * (c - 500) / 29_500))
    assert learning_rate(t, c + 1) == pytest.approx(want, rel=1e-12)


def test_clipping_bounds_the_gradient_norm_of_the_update():
    """The gradient the optimiser applies has norm clip_norm where the raw one is larger;
    what the log records as grad_norm is the norm before clipping, not the clip."""
    from mbc.training.packed import PackedRuns

    spec = tiny_spec()
    ds = build_dataset(spec.task, 0)
    norms = {}
    for clip in (0.0, 1e-3):
        pack = PackedRuns([_with_train(spec, clip_norm=clip)], [ds], CPU)
        pack.step()
        applied = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in pack.params]))
        norms[clip] = (float(applied), float(pack.grad_norms()[0]))
    assert norms[0.0][0] > 0.01  # the raw gradient is far larger than the clip
    assert norms[1e-3][0] == pytest.approx(1e-3, rel=1e-4)
    assert norms[1e-3][1] == pytest.approx(norms[0.0][0], rel=1e-4)


def test_crosses_mark_compares_sides_of_each_threshold():
    import math

    from mbc.training.schedule import crosses_mark

    lk = math.log(5)
    a = {"candidate_loss": 1.0 * lk, "first_target_loss": 2 * lk, "delta_z": 0.0}
    assert not crosses_mark(a, {**a, "candidate_loss": 0.97 * lk}, lk)
    assert crosses_mark(a, {**a, "candidate_loss": 0.92 * lk}, lk)  # 0.95
    assert crosses_mark(a, {**a, "delta_z": 0.02}, lk)  # 0.01 nats
    assert crosses_mark(a, {**a, "first_target_loss": 0.8 * lk}, lk)
    assert not crosses_mark(a, {**a, "delta_z_first": math.nan}, lk)
    assert crosses_mark(None, a, lk)


def test_dense_evaluation_equals_evaluating_every_dense_step(tmp_path):
    """Weights kept every dense_every steps and evaluated only around threshold crossings
    give exactly the rows an every-dense_every run logs there, and the same tau."""
    base = _with_train(tiny_spec(), max_steps=160)
    dense = _with_eval(
        base,
        every=40,
        dense_every=5,
        n_log=0,
        checkpoint_every=40,
        checkpoint_n_log=0,
        resume_every=40,
    )
    fine = _with_eval(dense, every=5, dense_every=0)
    ds = build_dataset(base.task, base.seed)
    a = train_run(dense, ds, tmp_path / "dense", CPU, say=lambda s: None)
    b = train_run(fine, ds, tmp_path / "fine", CPU, say=lambda s: None)
    cols = [c for c in a.columns if c not in ("run_id", "train_loss", "wall_s")]
    joined = a[cols].merge(b[cols], on="step", suffixes=("", "_fine"))
    assert len(joined) == len(a), "every dense-run row is a step of the fine run"
    for c in cols[1:]:
        assert np.array_equal(
            joined[c].to_numpy(), joined[c + "_fine"].to_numpy(), equal_nan=True
        ), c
    assert len(b) > len(a) > 160 // 40 + 1  # some intervals densified, not all
    lk = base.task.log_k
    tau = lambda m: m.step[m.candidate_loss < 0.5 * lk].min()  # noqa: E731
    assert tau(a) == tau(b)
    # the intervals left coarse are those without a crossing
    from mbc.training.schedule import crosses_mark

    rows = b.set_index("step").to_dict("index")
    for s0 in range(0, 160, 40):
        inside = set(range(s0 + 5, s0 + 40, 5))
        densified = inside <= set(a.step)
        assert densified == crosses_mark(rows[s0], rows[s0 + 40], lk), s0


def test_dense_evaluation_resumes_bitwise(tmp_path):
    spec = _with_eval(tiny_spec(), every=20, dense_every=5)
    ds = build_dataset(spec.task, spec.seed)
    train_run(spec, ds, tmp_path / "full", CPU, say=lambda s: None)
    train_run(spec, ds, tmp_path / "cut", CPU, say=lambda s: None, stop_after=73)
    train_run(spec, ds, tmp_path / "cut", CPU, say=lambda s: None)
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "cut"))


def test_transition_marks_cover_every_threshold_the_config_reads():
    """eval.dense_every locates crossings of TRANSITION_MARKS only: every threshold a
    statistic of config.yaml reads must be one of them."""
    from pathlib import Path

    import yaml

    from mbc.training.schedule import TRANSITION_MARKS

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    d = cfg["diagnostics"]
    lcand = {
        cfg["defaults"]["eval"]["threshold"],
        d["plateau"]["onset_fraction"],
        d["lead"]["loss_onset_fraction"],
        d["transition"]["start_fraction"],
        d["transition"]["end_fraction"],
        *cfg["threshold_sensitivity"]["thresholds"],
    }
    assert lcand <= set(TRANSITION_MARKS["candidate_loss"])
    first = {d["first_target"]["threshold"], d["lead"]["loss_onset_fraction"]}
    assert first <= set(TRANSITION_MARKS["first_target_loss"])
    gaps = {d["lead"]["delta_z_onset"], *cfg["plateau_sensitivity"]["delta_z_onsets"]}
    assert gaps <= set(TRANSITION_MARKS["delta_z"]) and gaps <= set(
        TRANSITION_MARKS["delta_z_first"]
    )


def test_training_says_progress_and_writes_strict_json(tmp_path):
    import json

    spec = _with_train(tiny_spec(), early_stop_tau_factor=2.0)
    ds = build_dataset(spec.task, spec.seed)
    said = []
    train_run(spec, ds, tmp_path, CPU, say=said.append, progress_every_s=0.0)
    lines = [m for m in said if m.startswith(f"{spec.run_id}: step ")]
    assert lines and all("L_cand/logK" in m and "steps/s" in m and "ETA" in m for m in lines)
    assert not [m for m in said if m.startswith("pack")]  # a run alone says its own line
    assert any(f"/{spec.train.max_steps:,}" in m for m in lines)
    assert any("tau = " in m for m in said)
    # every line of the live log is strict JSON (no bare NaN)
    for line in (tmp_path / "state" / "log.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_on_grid_statistics_equal_the_authors_every_dense_step_evaluation(tmp_path):
    """With log-spaced early evaluations (rounded onto the grid) and snapshots, every
    first-crossing statistic equals the one read from an evaluation at every grid step,
    and lies on the grid; without the grid a log-spaced step can report it earlier."""

    from mbc.diagnostics.config_sections import Summary
    from mbc.diagnostics.summary import summarize_run

    diag = Summary.from_raw(fixture_config()["diagnostics"])
    base = _with_train(tiny_spec(), max_steps=160)
    grid = _with_eval(
        base,
        every=40,
        dense_every=5,
        n_log=12,
        checkpoint_every=40,
        checkpoint_n_log=6,
        resume_every=40,
    )
    author = _with_eval(grid, every=5, n_log=0, checkpoint_n_log=0)  # his: every 5 steps
    ds = build_dataset(base.task, base.seed)
    a = train_run(grid, ds, tmp_path / "grid", CPU, say=lambda s: None)
    b = train_run(author, ds, tmp_path / "author", CPU, say=lambda s: None)
    assert set(a.step[a.step >= 5]) <= set(range(0, 161, 5))  # all on the grid from 5 on
    assert (a.step < 5).sum() > 1  # the curve's start stays finely sampled
    sa, sb = summarize_run(grid, a, diag), summarize_run(author, b, diag)
    keys = [
        "tau",
        "loss_onset",
        "delta_z_onset",
        "first_target_tau",
        "transition_start",
        "transition_end",
        "first_target_loss_onset",
        "delta_z_first_onset",
    ]
    assert sa["tau"] is not None
    for k in keys:
        assert sa[k] == sb[k], k
        assert sa[k] is None or sa[k] % 5 == 0, k


def test_bf16_precision_puts_the_matmuls_in_bf16_and_keeps_fp32_state(tmp_path):
    """train.precision: bf16 runs the training step's matmuls in bf16 (its loss differs from
    fp32 at bf16 rounding), keeps weights, gradients and AdamW state fp32, is a different
    run id (fp32's id unchanged), and still learns the task; another value is refused."""
    from mbc.training.packed import PackedRuns

    spec = tiny_spec()
    bf16 = _with_train(spec, precision="bf16")
    assert "-bf16-" in bf16.run_id and bf16.run_id != spec.run_id
    assert "precision" not in spec.to_dict()["train"]  # fp32: ids from before the key
    ds = build_dataset(spec.task, 0)
    lo, hi = (PackedRuns([s], [ds], CPU) for s in (bf16, spec))
    a, b = lo.step().losses, hi.step().losses
    assert a.dtype == b.dtype == torch.float32
    assert 1e-6 < abs(float(a - b)) < 0.05 * float(b)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in lo.params)
    assert all(
        v.dtype == torch.float32
        for st in lo.opt.state.values()
        for v in st.values()
        if torch.is_tensor(v) and v.is_floating_point()
    )
    with pytest.raises(ValueError, match="train.precision"):
        PackedRuns([_with_train(spec, precision="fp8")], [ds], CPU)
    m = train_run(bf16, ds, tmp_path / "bf16", CPU, say=lambda s: None)
    assert m["candidate_loss"].iloc[-1] < 0.5 * m["candidate_loss"].iloc[0]  # it learnt


def test_compiled_jobs_share_one_compile_cache_per_outdir(tmp_path, monkeypatch):
    """pipeline.train points torch's inductor cache at <outdir>/.mbc/torch_compile when the
    run compiles (so later jobs load the kernels); a user's own setting wins; eager runs
    leave the environment alone."""
    import pandas as pd

    import mbc.runs_pipeline as pipeline

    seen = []
    fake = pd.DataFrame({"step": [0], "candidate_loss": [1.0], "wall_s": [0.0]})
    monkeypatch.setattr(
        pipeline.trainer,
        "train_run",
        lambda *a, **k: seen.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR")) or fake,
    )
    monkeypatch.setattr(pipeline, "load_dataset", lambda path: None)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    run_dir = tmp_path / "out" / "runs" / "r1"
    pipeline.train(tiny_spec(), "ds.pt", run_dir)
    assert seen == [None]
    pipeline.train(_with_train(tiny_spec(), compile=True), "ds.pt", run_dir)
    assert seen[-1] == str((tmp_path / "out" / ".mbc" / "torch_compile").resolve())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere")
    pipeline.train(_with_train(tiny_spec(), compile=True), "ds.pt", run_dir)
    assert seen[-1] == "/elsewhere"


def test_the_early_stop_can_wait_for_the_first_target_crossing(tmp_path):
    """With train.early_stop_first_target the run goes on past factor x tau until it has
    also run factor x its first-target crossing (logged as its own event, read back on
    resume); without it the same run stops at factor x tau, so the option is what moved it.
    The first-target tau of the run's metrics is the logged crossing, not censored."""

    from mbc.core.journal import logged_first_target_tau, logged_tau, read_journal
    from mbc.diagnostics.config_sections import Summary
    from mbc.diagnostics.summary import summarize_run

    base = _with_train(
        tiny_spec(), early_stop_tau_factor=1.0, early_stop_loss_fraction=0.9, max_steps=2000
    )
    base = _with_eval(base, every=20, dense_every=0, n_log=0)
    ds = build_dataset(base.task, base.seed)
    plain = train_run(base, ds, tmp_path / "plain", CPU, say=lambda s: None)
    waits = _with_train(base, early_stop_first_target=True)
    assert waits.run_id != base.run_id and "early_stop_first_target" not in base.to_dict()["train"]
    late = train_run(waits, ds, tmp_path / "waits", CPU, say=lambda s: None)
    rows = read_journal(tmp_path / "waits" / "state" / "log.jsonl")
    tau, first = logged_tau(rows), logged_first_target_tau(rows)
    assert tau is not None and first is not None and first > tau, (tau, first)
    assert int(plain["step"].max()) < first <= int(late["step"].max())
    assert int(late["step"].max()) == first  # factor 1, loss bound met: stops at the crossing
    assert logged_first_target_tau(read_journal(tmp_path / "plain" / "state" / "log.jsonl")) is None
    diag = Summary.from_raw(fixture_config()["diagnostics"])
    summary = summarize_run(waits, late, diag)
    assert summary["first_target_tau"] == first and not summary["first_target_censored"]


def test_progress_eta_is_to_the_early_stop_step_then_an_upper_bound():
    """Before factor x tau the time left is to that step (the run stops there only if
    L_cand is below its loss condition); past it the run goes on until it is, and the line
    says the budget's time left as an upper bound (it said "ETA 0m00s (early stop)")."""
    from mbc.training.progress import run_line

    spec = _with_train(tiny_spec(), early_stop_tau_factor=2.0, max_steps=1000)
    row = {"candidate_loss": 0.5 * spec.task.log_k, "delta_z": 0.1}
    said = [
        run_line(spec, 100, row, tau=None, clock=None, rate=10.0),
        run_line(spec, 150, row, tau=100, clock=100, rate=10.0),
        run_line(spec, 400, row, tau=100, clock=100, rate=10.0),
    ]
    assert "early stop" not in said[0] and "at most" not in said[0], said[0]
    assert said[1].endswith("(early stop at step 200 if L_cand < 0.02 log K)"), said[1]
    assert said[2].endswith("at most (stops early once L_cand < 0.02 log K)"), said[2]

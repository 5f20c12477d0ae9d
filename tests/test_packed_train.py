"""A pack of R runs (mbc.training.train.train_pack) writes, per run, what the run alone (a pack
of one, `train_run`) writes:
the same evaluation steps, snapshots and tau, metrics equal to float32 rounding; an
interrupted pack resumes bitwise; runs at different steps and finished runs are handled."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_spec

from mbc.core.artifacts import write_json_atomic
from mbc.core.journal import logged_tau, read_journal
from mbc.core.packing import make_packs, pack_key, pack_priority
from mbc.training.data import build_dataset
from mbc.training.packed import PackedRuns
from mbc.training.train import train_pack, train_run
from mbc.workflow.integrity import RunFiles, repair, scan

CPU = torch.device("cpu")
QUIET = {"say": lambda m: None}
# float32 rounding: the packed model's batched matmuls sum in another order; every
# metric of every evaluation agrees to this (measured: at most 8e-6 here)
ATOL = 1e-4


def _train(spec, **kw):
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **kw))


def mixed_specs():
    """Runs a pack may hold together: other seeds, an early stop, warmup + cosine with
    clipping, another lr and budget, another init scale."""
    b = tiny_spec()
    return [
        b,
        dataclasses.replace(b, seed=1),
        _train(b, early_stop_tau_factor=1.5, early_stop_loss_fraction=0.5, max_steps=300),
        dataclasses.replace(
            _train(b, schedule="warmup_cosine", warmup_steps=10, clip_norm=1.0), seed=1
        ),
        _train(b, lr=1e-3, max_steps=80),
        dataclasses.replace(b, model=dataclasses.replace(b.model, init_std=0.2)),
        # the author's sampled evaluation beside the fixed one (E6)
        dataclasses.replace(b, eval=dataclasses.replace(b.eval, sampled_groups=8)),
        # label noise, the early stop on the logged first-target series (E12)
        _train(
            dataclasses.replace(b, task=dataclasses.replace(b.task, label_noise=0.2)),
            early_stop_series="train_log",
            early_stop_tau_factor=1.0,
            early_stop_loss_fraction=0.3,
        ),
    ]


def tables(run_dir):
    m = pd.read_csv(run_dir / "metrics.csv").drop(columns=["wall_s"])
    c = pd.read_csv(run_dir / "checkpoints.csv")
    return m, c


def assert_same_run(a_dir, b_dir, exact=False, crossed=True):
    """crossed: both runs have a tau (a label-noise run's clean L_cand may not cross)."""
    (ma, ca), (mb, cb) = tables(a_dir), tables(b_dir)
    assert ma["step"].tolist() == mb["step"].tolist(), "the same evaluation steps"
    assert ca["step"].tolist() == cb["step"].tolist(), "the same snapshot steps"
    ta, tb = (logged_tau(read_journal(d / "state" / "log.jsonl")) for d in (a_dir, b_dir))
    assert ta == tb and (ta is not None or not crossed), (ta, tb)
    if exact:
        pd.testing.assert_frame_equal(ma, mb)
        return
    num = [c for c in ma.columns if c not in ("run_id", "step")]
    np.testing.assert_allclose(ma[num].to_numpy(), mb[num].to_numpy(), rtol=0, atol=ATOL)
    assert (ma.run_id == mb.run_id).all()


def test_packed_runs_write_what_unpacked_runs_write(tmp_path):
    specs = mixed_specs()
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    assert len({pack_key(s) for s in specs}) == 1
    for i, (s, ds) in enumerate(zip(specs, datasets, strict=True)):
        train_run(s, ds, tmp_path / f"alone{i}", CPU, **QUIET)
    said = []
    dirs = [tmp_path / f"packed{i}" for i in range(len(specs))]
    trained = train_pack(specs, datasets, dirs, CPU, say=said.append, progress_every_s=0.0)
    assert trained == [True] * len(specs)
    # a pack says its own progress line, never one run's
    assert any(m.startswith("pack step ") and "still training" in m for m in said)
    assert not [m for m in said if any(m.startswith(f"{s.run_id}: step") for s in specs)]
    for i in range(len(specs)):
        assert_same_run(tmp_path / f"alone{i}", dirs[i], crossed=not specs[i].task.label_noise)
        # the author's training-log series (running first-target loss, deranged last batch)
        a, b = (pd.read_csv(d / "train_log.csv") for d in (tmp_path / f"alone{i}", dirs[i]))
        assert a.step.tolist() == b.step.tolist() and len(a) > 2
        assert b.train_first_shuffled_loss.notna().all() and b.train_first_loss.notna().all()
        num = [
            "train_first_loss",
            "train_first_shuffled_loss",
            "delta_z_train_first",
            "candidate_loss_sampled",
        ]
        np.testing.assert_allclose(b[num].to_numpy(), a[num].to_numpy(), rtol=0, atol=ATOL)
        assert b.candidate_loss_sampled.notna().all() == bool(specs[i].eval.sampled_groups)
    # the early-stopped run and the 80-step run left the pack; the others went on
    assert any("early stop at step 60" in line for line in said), said
    assert pd.read_csv(dirs[4] / "metrics.csv").step.max() == 80
    assert pd.read_csv(dirs[0] / "metrics.csv").step.max() == specs[0].train.max_steps
    # the resume point of a packed run is an ordinary run's: train_run picks it up
    state = torch.load(dirs[0] / "state" / "resume.pt", weights_only=False)
    assert set(state) == {"model", "optimizer", "step"} and state["step"] == 120

    # finished runs are not trained again; their tables stay as they were
    before = [tables(d)[0] for d in dirs]
    assert train_pack(specs, datasets, dirs, CPU, **QUIET) == [False] * len(specs)
    for d, m in zip(dirs, before, strict=True):
        pd.testing.assert_frame_equal(tables(d)[0], m)


@pytest.mark.parametrize(
    ("linear_input", "pack"),
    [
        ("characters", "linear512z2-T16t5p10-B16-fp32-0"),
        ("identity", "linear_identity512z2G12-T16t5p10-B16-fp32-0"),
    ],
)
def test_packed_linear_runs_write_what_unpacked_ones_write(tmp_path, linear_input, pack):
    """E13's linear baselines train in a pack (`PackedLinear`) and write what they write
    trained alone, to float32 rounding; each kind's pack has its own id."""
    b = tiny_spec()
    model = dataclasses.replace(b.model, kind="linear", linear_input=linear_input)
    b = dataclasses.replace(b, model=model)
    specs = [b, dataclasses.replace(b, seed=1), _train(b, lr=1e-3, max_steps=80)]
    assert list(make_packs({str(i): s for i, s in enumerate(specs)}, 8)) == [pack]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    for i, (s, ds) in enumerate(zip(specs, datasets, strict=True)):
        train_run(s, ds, tmp_path / f"alone{i}", CPU, **QUIET)
    dirs = [tmp_path / f"packed{i}" for i in range(len(specs))]
    assert train_pack(specs, datasets, dirs, CPU, **QUIET) == [True] * len(specs)
    for i in range(len(specs)):
        assert_same_run(tmp_path / f"alone{i}", dirs[i], crossed=False)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_interrupted_pack_resumes_bitwise(tmp_path, precision):
    specs = [_train(s, precision=precision) for s in mixed_specs()[:4]]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    whole = [tmp_path / f"whole{i}" for i in range(len(specs))]
    cut = [tmp_path / f"cut{i}" for i in range(len(specs))]
    train_pack(specs, datasets, whole, CPU, **QUIET)
    assert train_pack(specs, datasets, cut, CPU, stop_after=50, **QUIET) == [True] * 4
    assert not (cut[0] / "metrics.csv").exists()
    said = []
    train_pack(specs, datasets, cut, CPU, say=said.append)
    assert any("from step 40" in line for line in said), said  # resume_every = 20
    for a, b in zip(whole, cut, strict=True):
        assert_same_run(a, b, exact=True)


def _identity(spec):
    return dataclasses.replace(
        spec, model=dataclasses.replace(spec.model, kind="linear", linear_input="identity")
    )


def test_interrupted_identity_linear_pack_resumes_bitwise(tmp_path):
    """E13_identity's B strings are a buffer, not a parameter: they travel through the resume
    point, and the resumed runs end bitwise where uninterrupted ones do."""
    specs = [_identity(tiny_spec()), dataclasses.replace(_identity(tiny_spec()), seed=1)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    whole = [tmp_path / f"whole{i}" for i in range(2)]
    cut = [tmp_path / f"cut{i}" for i in range(2)]
    train_pack(specs, datasets, whole, CPU, **QUIET)
    assert train_pack(specs, datasets, cut, CPU, stop_after=50, **QUIET) == [True] * 2
    said = []
    train_pack(specs, datasets, cut, CPU, say=said.append)
    assert any("from step 40" in line for line in said), said
    for a, b in zip(whole, cut, strict=True):
        assert_same_run(a, b, exact=True)


def test_an_identity_run_refuses_a_dataset_with_other_b_strings():
    """A dataset whose B strings are not the ones its model reads (another seed's here; a
    file from another generator under the same id in life) would give every B a zero e_B:
    refused, naming the run."""
    spec = _identity(tiny_spec())
    with pytest.raises(ValueError, match=f"run {spec.run_id}: its dataset's B strings"):
        PackedRuns([spec], [build_dataset(spec.task, 1)], CPU)


def test_runs_at_different_steps_catch_up_then_train_together(tmp_path):
    """One run resumes at step 40 (an interrupted unpacked job), two start afresh: the two
    train to step 40 as a pack of two, then all three together."""
    specs = mixed_specs()[:3]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    for i, (s, ds) in enumerate(zip(specs, datasets, strict=True)):
        train_run(s, ds, tmp_path / f"alone{i}", CPU, **QUIET)
    dirs = [tmp_path / f"p{i}" for i in range(3)]
    train_run(specs[1], datasets[1], dirs[1], CPU, stop_after=50, **QUIET)
    said = []
    train_pack(specs, datasets, dirs, CPU, say=said.append)
    packs = [line for line in said if line.startswith("pack:")]
    assert packs[:2] == ["pack: 2 run(s) from step 0 to 40", "pack: 3 run(s) from step 40"]
    for i in range(3):
        assert_same_run(tmp_path / f"alone{i}", dirs[i])


def test_make_packs_groups_by_shape_and_caps_the_size():
    b = tiny_spec()
    specs = [dataclasses.replace(b, seed=s) for s in range(5)]
    specs += [
        _train(b, batch_size=8),
        dataclasses.replace(b, model=dataclasses.replace(b.model, kind="linear")),
    ]
    by_id = {s.run_id: s for s in specs}
    packs = make_packs(by_id, max_runs=2)
    sizes = sorted(len(m) for m in packs.values())
    # 5 seeds -> 2 + 2 + 1; batch 8 alone; the linear baseline in a pack of its own kind
    assert sizes == [1, 1, 1, 2, 2], packs
    assert sorted(packs) == [
        "L2h2d32m64-T16t5p10-B16-fp32-0",
        "L2h2d32m64-T16t5p10-B16-fp32-1",
        "L2h2d32m64-T16t5p10-B16-fp32-2",
        "L2h2d32m64-T16t5p10-B8-fp32-0",
        "linear512z2-T16t5p10-B16-fp32-0",
    ]
    assert packs["linear512z2-T16t5p10-B16-fp32-0"] == [specs[-1].run_id]
    assert make_packs(by_id, max_runs=2) == packs, "the same runs form the same packs"
    # a new run joins its shape's last pack under the same id; the others keep theirs
    more = {**by_id, (new := dataclasses.replace(b, seed=9)).run_id: new}
    grown = make_packs(more, max_runs=3)
    assert (
        set(grown) == set(make_packs(by_id, max_runs=3))
        and new.run_id in grown["L2h2d32m64-T16t5p10-B16-fp32-1"]
    )
    with pytest.raises(ValueError, match="max_runs"):
        make_packs(by_id, max_runs=0)


def test_the_pack_with_the_most_budgeted_work_starts_first():
    """pack_priority (train_pack's Snakemake priority): a pack's budgeted run-steps."""
    b = tiny_spec()
    short = [dataclasses.replace(b, seed=s) for s in range(3)]
    long = [_train(dataclasses.replace(b, seed=s), max_steps=5000) for s in range(2)]
    assert pack_priority(long) == 10000
    assert pack_priority(short) == 3 * b.train.max_steps


def test_a_packed_run_to_train_again_reruns_its_pack(tmp_path):
    """Start-up repair: a packed run's tables come from its log. Tables gone, log done:
    the pack's manifest stays (`unpack_run` rewrites them). A snapshot gone (the run is
    retrained, when a diagnostic reads them): the manifest is deleted, so its pack runs
    again."""
    spec = tiny_spec()
    run_dir = tmp_path / "runs" / spec.run_id
    ds_path = tmp_path / "ds.pt"
    ds_path.write_bytes(b"x")
    manifest = tmp_path / "packs" / "pack1-abc.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"runs": []}))
    train_pack([spec], [build_dataset(spec.task, spec.seed)], [run_dir], CPU, **QUIET)
    files = RunFiles(
        spec.run_id,
        ds_path,
        [run_dir / "metrics.csv", run_dir / "checkpoints.csv"],
        run_dir / "summary.json",
        pack=manifest,
    )
    (run_dir / "metrics.csv").unlink()
    lines = repair(scan([files], []), [files], [])
    assert manifest.exists(), lines
    train_pack([spec], [build_dataset(spec.task, spec.seed)], [run_dir], CPU, **QUIET)
    assert not (run_dir / "metrics.csv").exists(), "a finished run's tables are unpack_run's"
    from mbc.runs_pipeline import unpack_run

    unpack_run(spec, run_dir)
    next((run_dir / "state" / "snapshots").glob("*.pt")).unlink()
    write_json_atomic(run_dir / "summary.json", {})  # with its sidecar, as its rule writes it
    assert scan([files], []) == [], "no diagnostic reads its snapshots: nothing is broken"
    files = dataclasses.replace(files, diagnostics=[run_dir / "hessian.csv"])
    (run_dir / "hessian.csv").write_text("x\n")
    lines = repair(scan([files], []), [files], [])
    assert not manifest.exists(), lines
    assert any("its pack trains" in line for line in lines), lines
    # only missing, nothing bad: the old state (its log) is kept as `replaced`, not corrupt
    assert any("snapshot missing (a diagnostic reads this run" in line for line in lines)
    assert not (run_dir / "state").exists() and len(list(run_dir.glob("state.replaced-*"))) == 1
    assert not list(run_dir.glob("state.corrupt-*"))


def test_a_log_at_its_budget_without_done_is_finished(tmp_path):
    """A log whose last resume point is the budget but whose `done` line was never
    written (a kill between the two): not one more step."""
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    train_run(spec, ds, tmp_path / "r", CPU, **QUIET)
    log = tmp_path / "r" / "state" / "log.jsonl"
    lines = log.read_text().splitlines()
    done = json.loads(lines[-1])
    assert (done["event"], done["step"]) == ("done", 120) and "time" in done
    log.write_text("\n".join(lines[:-1]) + "\n")
    before = pd.read_csv(tmp_path / "r" / "metrics.csv")
    for again in (train_run, lambda s, d, r, c, **kw: train_pack([s], [d], [r], c, **kw)):
        again(spec, ds, tmp_path / "r", CPU, **QUIET)
        rows = read_journal(log)
        assert (rows[-1]["event"], rows[-1]["step"]) == ("done", 120)
        assert max(r["step"] for r in rows if "event" not in r) == 120
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "r" / "metrics.csv"), before)


def test_batched_evaluation_equals_each_runs_own():
    """PackedTransformer.evaluate (one forward for many runs; `fast`: the K candidates
    behind one run of their shared prefix, `plain`: every candidate in full) against each
    run's own model's evaluation by the same engine, z-shuffle included; chunked."""
    from mbc.training.metrics import evaluate, evaluate_shared_prefix
    from mbc.training.packed import PackedRuns
    from mbc.training.setup import eval_batch

    specs = [dataclasses.replace(tiny_spec(), seed=s) for s in range(3)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    pack = PackedRuns(specs, datasets, CPU)
    for _ in range(30):
        pack.step()
    batches = [eval_batch(s, ds, CPU) for s, ds in zip(specs, datasets, strict=True)]
    for engine in ("fast", "plain"):
        got = pack.model.evaluate([2, 0], [batches[2], batches[0]], max_seqs=50, engine=engine)
        for r, m in zip([2, 0], got, strict=True):
            model, _ = pack.export_run(r)
            ref = (evaluate_shared_prefix if engine == "fast" else evaluate)(model, batches[r])
            assert m.keys() == ref.keys()
            for key in ref:
                assert m[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-6), (engine, key)
        assert got[0]["candidate_loss"] != got[1]["candidate_loss"]


def test_packed_runs_with_batched_evaluation_write_what_unpacked_runs_write(tmp_path, monkeypatch):
    """batched_eval (the CUDA default) on a CPU: runs of equal K evaluated together, a run
    of its own K alone; every table still equals the unpacked run's."""
    from mbc.training.packed_models import PackedTransformer

    widths = []
    batched = PackedTransformer.evaluate
    monkeypatch.setattr(
        PackedTransformer,
        "evaluate",
        lambda self, runs, b, **kw: widths.append(len(runs)) or batched(self, runs, b, **kw),
    )
    specs = mixed_specs()[:4] + [dataclasses.replace(tiny_spec(k=5), seed=2)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    for i, (s, ds) in enumerate(zip(specs, datasets, strict=True)):
        train_run(s, ds, tmp_path / f"alone{i}", CPU, **QUIET)
    dirs = [tmp_path / f"packed{i}" for i in range(len(specs))]
    train_pack(specs, datasets, dirs, CPU, batched_eval=True, **QUIET)
    assert widths and max(widths) == 4, widths  # the four K = 3 runs at once, K = 5 alone
    for i in range(len(specs)):
        assert_same_run(tmp_path / f"alone{i}", dirs[i])

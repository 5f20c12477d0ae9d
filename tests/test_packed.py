"""The one training step (`mbc.training.packed.PackedRuns.step`): a pack of one equals the
textbook training loop (tests/textbook.py), and a pack of R equals R packs of one."""

import dataclasses

import pytest
import torch
from helpers import tiny_spec
from textbook import textbook_run

from mbc.training.data import build_dataset
from mbc.training.metrics import training_loss
from mbc.training.packed import PackedRuns
from mbc.training.setup import eval_batch

CPU = torch.device("cpu")
STEPS = 20


def _steps(specs, datasets, steps=STEPS, ordinary=False):
    """(the pack, losses (R, steps), first-target losses (R, steps)) of `specs` as one pack
    (ordinary: one run alone, as `train_run` trains it)."""
    pack = PackedRuns(specs, datasets, CPU, ordinary=ordinary)
    out = [pack.step() for _ in range(steps)]
    losses = torch.stack([o.losses for o in out]).T
    return pack, losses, torch.stack([o.first_losses for o in out]).T


def _regime(spec, regime: str):
    """constant: the run's own; warmup_cosine_clipped: warmup + cosine, clipped at a norm
    the tiny model's gradients exceed at every step."""
    if regime == "constant":
        return spec
    train = dataclasses.replace(
        spec.train, schedule="warmup_cosine", warmup_steps=5, max_steps=STEPS, clip_norm=0.05
    )
    return dataclasses.replace(spec, train=train)


@pytest.mark.parametrize("ordinary", [False, True], ids=["stacked", "ordinary"])
@pytest.mark.parametrize("regime", ["constant", "warmup_cosine_clipped"])
def test_a_pack_of_one_takes_the_textbook_step(regime, ordinary):
    """The training loss, the first-target loss from the same logits, the gradient norm
    before clipping, and the weights after it (through the model's outputs), to float32
    rounding, in a pack's stacked arithmetic and in a lone run's ordinary one; with
    warmup + cosine and clipping at a norm the gradients exceed."""
    spec = _regime(tiny_spec(), regime)
    ds = build_dataset(spec.task, spec.seed)
    ref = textbook_run(spec, ds, STEPS)
    pack = PackedRuns([spec], [ds], CPU, ordinary=ordinary)
    got = [pack.step() for _ in range(STEPS)]
    torch.testing.assert_close([float(g.losses[0]) for g in got], ref.losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        [float(g.first_losses[0]) for g in got], ref.first_losses, rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(float(pack.grad_norms()[0]), ref.grad_norms[-1], rtol=1e-4, atol=0)
    if regime != "constant":
        assert min(ref.grad_norms) > 0.05, "the clip binds at every step"
    model, _ = pack.export_run(0)
    x = ds.tokens[: spec.train.batch_size]
    torch.testing.assert_close(model(x), ref.model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("regime", ["constant", "warmup_cosine_clipped"])
def test_a_run_alone_is_bitwise_the_ordinary_model_with_torchs_fused_adamw(regime):
    """In fp32 a run alone (`ordinary`) takes the ordinary model's step bit for bit: its
    plain-weight forward, torch's mean cross-entropy, torch's clip_grad_norm_ (norm and
    coefficient) and fused AdamW: every loss and every weight equal (what keeps a run
    trained alone, as every smoke run is, bitwise what it was before the one trainer)."""
    spec = _regime(tiny_spec(), regime)
    ds = build_dataset(spec.task, spec.seed)
    ref = textbook_run(spec, ds, STEPS, fused=True)
    pack, losses, firsts = _steps([spec], [ds], ordinary=True)
    assert losses[0].tolist() == ref.losses
    assert firsts[0].tolist() == ref.first_losses
    got = pack.weights(0)
    for name, w in ref.model.state_dict().items():
        assert torch.equal(got[name], w), name


def _with(spec, seed=None, lr=None, **task):
    t = dataclasses.replace(spec.task, **task)
    tr = spec.train if lr is None else dataclasses.replace(spec.train, lr=lr)
    return dataclasses.replace(spec, task=t, train=tr, seed=spec.seed if seed is None else seed)


@pytest.mark.parametrize(
    "variant",
    ["seeds", "mixed"],  # same hyperparameters (torch AdamW) / per-run lr, K and D (PackedAdamW)
)
def test_a_pack_of_r_takes_the_step_of_each_run_alone(variant):
    base = tiny_spec()
    if variant == "seeds":
        specs = [_with(base, seed=s) for s in (0, 1, 2)]
    else:
        specs = [
            _with(base, seed=0),
            _with(base, seed=1, lr=1e-3, k=5),
            _with(base, seed=2, lr=5e-3, n_groups=20),
        ]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    packed, got, got_first = _steps(specs, datasets)
    for r, (s, ds) in enumerate(zip(specs, datasets, strict=True)):
        alone, losses, first = _steps([s], [ds], ordinary=True)
        torch.testing.assert_close(got[r], losses[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got_first[r], first[0], rtol=1e-4, atol=1e-5)
        # export: the same function, and one more ordinary step continues identically.
        # (Weights are compared through the model's outputs: the key bias has an exactly
        # zero gradient, softmax being shift invariant, so Adam turns rounding noise there
        # into lr-sized steps that differ between runs and change nothing downstream.)
        (m2, o2), (model, opt) = packed.export_run(r), alone.export_run(0)
        x = ds.tokens[: s.train.batch_size]
        torch.testing.assert_close(m2(x), model(x), rtol=1e-4, atol=1e-5)
        for m, o in ((model, opt), (m2, o2)):
            o.zero_grad()
            training_loss(m, x).backward()
            o.step()
        torch.testing.assert_close(
            training_loss(model, x), training_loss(m2, x), rtol=1e-4, atol=1e-5
        )
    assert got[:, 0].unique().numel() == 3, "each run has its own init and data"


@pytest.mark.parametrize("linear_input", ["characters", "identity"])
@pytest.mark.parametrize("variant", ["seeds", "mixed"])
def test_packed_linear_baseline_matches_independent_runs(variant, linear_input):
    """E13's linear baseline packs too (`PackedLinear`), on B's characters or B's identity
    (each run its own dataset's base strings): each run's losses are its own unpacked run's
    to float32 rounding, its exported model the same function, and a pack's batched
    evaluation the run's own."""
    from mbc.training.metrics import evaluate

    base = tiny_spec()
    model = dataclasses.replace(base.model, kind="linear", linear_input=linear_input)
    base = dataclasses.replace(base, model=model)
    if variant == "seeds":
        specs = [_with(base, seed=s) for s in (0, 1, 2)]
    else:
        specs = [_with(base, seed=0), _with(base, seed=1, lr=1e-3, k=5), _with(base, seed=2)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    ref = [textbook_run(s, ds, STEPS) for s, ds in zip(specs, datasets, strict=True)]
    packed, got, _ = _steps(specs, datasets)
    assert type(packed.model).__name__ == "PackedLinear"
    for r, run in enumerate(ref):
        torch.testing.assert_close(got[r].tolist(), run.losses, rtol=1e-5, atol=1e-6)
        m2, _ = packed.export_run(r)
        x = datasets[r].tokens[: specs[r].train.batch_size]
        torch.testing.assert_close(m2(x), run.model(x), rtol=1e-5, atol=1e-6)
    assert got[:, 0].unique().numel() == 3, "each run has its own init and data"
    same_k = [r for r, s in enumerate(specs) if s.task.k == specs[0].task.k]  # one shape
    batches = [eval_batch(specs[r], datasets[r], CPU) for r in same_k]
    together = packed.model.evaluate(same_k, batches)
    for j, (r, b) in enumerate(zip(same_k, batches, strict=True)):
        alone = evaluate(packed.export_run(r)[0], b)
        for k, v in alone.items():
            assert together[j][k] == pytest.approx(v, rel=1e-5, abs=1e-6, nan_ok=True), k


@pytest.mark.parametrize(
    ("width", "ordinary"), [(1, True), (1, False), (2, False)], ids=["alone", "pack1", "pack2"]
)
def test_bf16_pack_takes_the_autocast_step_of_each_run(width, ordinary):
    """train.precision bf16: the pack's one bf16 copy of the linear layers per step gives
    each run the step of the textbook bf16-autocast training (the same casts, op for
    op): equal at the first step to rounding; bf16 rounding then compounds slowly
    (measured here: at most 8e-4 relative in 20 steps, 3e-2 in 60)."""
    base = tiny_spec()
    base = dataclasses.replace(base, train=dataclasses.replace(base.train, precision="bf16"))
    specs = [_with(base, seed=0), _with(base, seed=1, lr=1e-3, k=5)][:width]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    packed, got, _ = _steps(specs, datasets, ordinary=ordinary)
    assert packed._low_copies()["unembed.weight"].dtype == torch.bfloat16
    for r, (spec, ds) in enumerate(zip(specs, datasets, strict=True)):
        ref = torch.tensor(textbook_run(spec, ds, STEPS).losses)
        torch.testing.assert_close(got[r, 0], ref[0], rtol=1e-5, atol=0)
        torch.testing.assert_close(got[r], ref, rtol=2e-3, atol=0)
        # the master weights and their gradients stay fp32
        assert packed.model.p("unembed.weight").dtype == torch.float32
        assert packed.model.p("unembed.weight").grad.dtype == torch.float32


def test_packed_rejects_different_shapes():
    a = tiny_spec()
    b = dataclasses.replace(a, model=dataclasses.replace(a.model, d_model=16))
    with pytest.raises(ValueError, match="pack_key"):
        PackedRuns([a, b], [build_dataset(s.task, 0) for s in (a, b)], CPU)


@pytest.mark.parametrize(
    "change",
    [{"train": {"batch_size": 8}}, {"train": {"precision": "bf16"}}, {"model": {"kind": "linear"}}],
)
def test_packed_refuses_runs_that_do_not_share_a_pack_key(change):
    a = tiny_spec()
    b = a
    for part, fields in change.items():
        b = dataclasses.replace(b, **{part: dataclasses.replace(getattr(b, part), **fields)})
    with pytest.raises(ValueError, match="pack_key"):
        PackedRuns([a, b], [build_dataset(s.task, 0) for s in (a, b)], CPU)


@pytest.mark.parametrize(
    "task", [{}, {"direction": "a_to_b"}, {"direction": "az_to_b"}, {"z_length": 4, "k": 5}]
)
def test_forward_and_shared_prefix_evaluation_equal_the_textbook_paths(task):
    """The model's forward (used by the packed model's blocks too) against the textbook
    forward, gradients included; the shared-prefix evaluation against the full one."""
    import numpy as np
    from reference_model import reference_logits

    from mbc.training.metrics import (
        evaluate,
        evaluate_shared_prefix,
        fixed_contexts,
        make_eval_batch,
    )

    spec = _with(tiny_spec(), **task)
    ds = build_dataset(spec.task, 0)
    model = textbook_run(spec, ds, steps=10).model  # trained a little: not at its init
    x = ds.tokens[:32]
    ref = reference_logits(model, x)
    torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)
    n_t = spec.task.n_targets
    a = training_loss(model, x)
    b = torch.nn.functional.cross_entropy(ref.reshape(-1, ref.shape[-1]), x[:, -n_t:].reshape(-1))
    torch.testing.assert_close(a, b)
    params = list(model.parameters())
    for ga, gb in zip(torch.autograd.grad(a, params), torch.autograd.grad(b, params), strict=True):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)
    rng = np.random.default_rng(0)
    batch = make_eval_batch(ds, fixed_contexts(ds, 20, rng), rng)
    plain, fast = evaluate(model, batch), evaluate_shared_prefix(model, batch, chunk=20)
    assert plain.keys() == fast.keys()
    for k in plain:
        assert np.isclose(plain[k], fast[k], rtol=1e-5, atol=1e-6, equal_nan=True), k


def test_compile_without_a_cxx_compiler_trains_eager_and_says_so_once(monkeypatch, capsys):
    """train.compile on a machine without a C++ compiler (a cluster node unlike the host that
    resolved `auto`): one line, then the eager step, bitwise the uncompiled run's."""
    from mbc.training import packed

    spec = tiny_spec()
    compiled = dataclasses.replace(spec, train=dataclasses.replace(spec.train, compile=True))
    ds = build_dataset(spec.task, spec.seed)
    cpu = torch.device("cpu")
    packed._without_cxx.cache_clear()
    monkeypatch.setattr(packed, "cxx_compiler", lambda: None)
    try:
        runs = [PackedRuns([s], [ds], cpu, ordinary=True) for s in (compiled, compiled, spec)]
        assert runs[0]._loss == runs[0].model.losses, "compiled without a compiler"
        losses = [[r.step().losses.tolist() for _ in range(3)] for r in runs]
    finally:
        packed._without_cxx.cache_clear()
    assert losses[0] == losses[1] == losses[2]
    err = capsys.readouterr().err
    assert err.count("mbc: train.compile: no C++ compiler on this machine") == 1, err

"""Packed training of R runs == R independent runs of the ordinary training loop."""

import dataclasses

import pytest
import torch
from helpers import tiny_spec

from mbc.training.data import STREAM_INIT, BatchOrder, build_dataset, stream_seed
from mbc.training.metrics import training_loss
from mbc.training.model import build_model
from mbc.training.packed import PackedRuns
from mbc.training.train import fresh_run, make_optimizer

CPU = torch.device("cpu")
STEPS = 20


def independent_losses(spec, ds, steps=STEPS):
    """The step of mbc.training.train.train_run, verbatim."""
    model = build_model(
        spec.model, spec.task, torch.Generator().manual_seed(stream_seed(spec.seed, STREAM_INIT))
    )
    model.train()
    opt = make_optimizer(model, spec, CPU)
    order = BatchOrder(ds.tokens.shape[0], spec.train.batch_size, spec.seed, CPU)
    out = []
    for step in range(1, steps + 1):
        loss = training_loss(model, ds.tokens[order.indices(step)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out, model, opt


def _with(spec, seed=None, lr=None, **task):
    t = dataclasses.replace(spec.task, **task)
    tr = spec.train if lr is None else dataclasses.replace(spec.train, lr=lr)
    return dataclasses.replace(spec, task=t, train=tr, seed=spec.seed if seed is None else seed)


@pytest.mark.parametrize(
    "variant",
    ["seeds", "mixed"],  # same hyperparameters (torch AdamW) / per-run lr, K and D (PackedAdamW)
)
def test_packed_matches_independent_runs(variant):
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
    ref = [independent_losses(s, ds) for s, ds in zip(specs, datasets, strict=True)]

    packed = PackedRuns(specs, datasets, CPU)
    got = torch.stack([packed.step() for _ in range(STEPS)]).T  # (R, steps)
    for r, (losses, model, opt) in enumerate(ref):
        torch.testing.assert_close(got[r].tolist(), losses, rtol=1e-4, atol=1e-5)
        # export: the same function, and one more ordinary step continues identically.
        # (Weights are compared through the model's outputs: the key bias has an exactly
        # zero gradient, softmax being shift invariant, so Adam turns rounding noise there
        # into lr-sized steps that differ between runs and change nothing downstream.)
        m2, o2 = packed.export_run(r)
        x = datasets[r].tokens[: specs[r].train.batch_size]
        torch.testing.assert_close(m2(x), model(x), rtol=1e-4, atol=1e-5)
        for m, o in ((model, opt), (m2, o2)):
            o.zero_grad()
            training_loss(m, x).backward()
            o.step()
        torch.testing.assert_close(
            training_loss(model, x), training_loss(m2, x), rtol=1e-4, atol=1e-5
        )
    assert got[:, 0].unique().numel() == 3, "each run has its own init and data"


@pytest.mark.parametrize("variant", ["seeds", "mixed"])
def test_packed_linear_baseline_matches_independent_runs(variant):
    """E13's linear baseline packs too (`PackedLinear`): each run's losses are its own
    unpacked run's to float32 rounding, its exported model the same function, and a pack's
    batched evaluation the run's own."""
    from mbc.training.metrics import evaluate
    from mbc.training.train import eval_batch

    base = tiny_spec()
    base = dataclasses.replace(base, model=dataclasses.replace(base.model, kind="linear"))
    if variant == "seeds":
        specs = [_with(base, seed=s) for s in (0, 1, 2)]
    else:
        specs = [_with(base, seed=0), _with(base, seed=1, lr=1e-3, k=5), _with(base, seed=2)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    ref = [independent_losses(s, ds) for s, ds in zip(specs, datasets, strict=True)]
    packed = PackedRuns(specs, datasets, CPU)
    assert type(packed.model).__name__ == "PackedLinear"
    got = torch.stack([packed.step() for _ in range(STEPS)]).T
    for r, (losses, model, _) in enumerate(ref):
        torch.testing.assert_close(got[r].tolist(), losses, rtol=1e-5, atol=1e-6)
        m2, _ = packed.export_run(r)
        x = datasets[r].tokens[: specs[r].train.batch_size]
        torch.testing.assert_close(m2(x), model(x), rtol=1e-5, atol=1e-6)
    assert got[:, 0].unique().numel() == 3, "each run has its own init and data"
    same_k = [r for r, s in enumerate(specs) if s.task.k == specs[0].task.k]  # one shape
    batches = [eval_batch(specs[r], datasets[r], CPU) for r in same_k]
    together = packed.model.evaluate(same_k, batches)
    for j, (r, b) in enumerate(zip(same_k, batches, strict=True)):
        alone = evaluate(packed.export_run(r)[0], b)
        for k, v in alone.items():
            assert together[j][k] == pytest.approx(v, rel=1e-5, abs=1e-6, nan_ok=True), k


def test_bf16_pack_takes_the_autocast_step_of_each_run():
    """train.precision bf16: the pack's one bf16 copy of the linear layers per step gives
    each run the step of its own unpacked bf16-autocast training (the same casts, op for
    op): equal at the first step to rounding; bf16 rounding then compounds slowly
    (measured here: at most 8e-4 relative in 20 steps, 3e-2 in 60)."""
    base = tiny_spec()
    base = dataclasses.replace(base, train=dataclasses.replace(base.train, precision="bf16"))
    specs = [_with(base, seed=0), _with(base, seed=1, lr=1e-3, k=5)]
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    packed = PackedRuns(specs, datasets, CPU)
    assert packed._low_copies()["unembed.weight"].dtype == torch.bfloat16
    got = torch.stack([packed.step() for _ in range(STEPS)]).T
    for r, (spec, ds) in enumerate(zip(specs, datasets, strict=True)):
        run = fresh_run(spec, ds, CPU)
        ref = torch.tensor([float(run.step(s)) for s in range(1, STEPS + 1)])
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
    _, model, _ = independent_losses(spec, ds, steps=10)
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

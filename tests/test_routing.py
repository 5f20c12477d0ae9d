"""Routing-head diagnostics (docs/method.md#routing-head) against the textbook forward."""

import numpy as np
import torch
from helpers import tiny_spec
from reference_model import reference_logits

from mbc.diagnostics.routing import ablations, attention_to_z, clean_sequences
from mbc.training.data import build_dataset
from mbc.training.metrics import EvalBatch, fixed_contexts, make_eval_batch
from mbc.training.model import build_model


def _setup():
    spec = tiny_spec()
    ds = build_dataset(spec.task, 0)
    model = build_model(spec.model, spec.task, torch.Generator().manual_seed(0)).eval()
    rng = np.random.default_rng(0)
    return model, make_eval_batch(ds, fixed_contexts(ds, 24, rng), rng)


def _token_loss(model, seqs, scale=None):
    logits = reference_logits(model, seqs, scale)
    n_t = model.task.n_targets
    return float(
        torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).double(), seqs[:, -n_t:].reshape(-1)
        )
    )


def test_zero_ablation_rows_equal_the_textbook_model_with_that_head_zeroed():
    model, batch = _setup()
    with torch.no_grad():
        rows = ablations(model, batch)
        clean = clean_sequences(batch)
        base = _token_loss(model, clean)
        base_dz = _token_loss(model, batch.shuffled) - base
        layers, heads = model.spec.n_layers, model.spec.n_heads
        assert len(rows) == layers * heads * 3
        for layer, head, kind, d_loss, d_dz in rows:
            if kind != "zero":
                continue
            scale = torch.ones(layers, heads)
            scale[layer, head] = 0
            loss = _token_loss(model, clean, scale)
            dz = _token_loss(model, batch.shuffled, scale) - loss
            assert abs(d_loss - (loss - base)) < 1e-5, (layer, head)
            assert abs(d_dz - (dz - base_dz)) < 1e-5, (layer, head)


def test_mean_ablation_on_identical_contexts_changes_nothing():
    """Mean-ablating a head over a batch of one repeated context replaces its output on the
    clean sequences by itself: the clean loss does not move (sufficiency mean-ablates the
    others: same). delta_z may: the z-shuffled sequences get the clean mean."""
    model, batch = _setup()
    one = EvalBatch(
        batch.task,
        batch.examples[:1].repeat(6),
        batch.candidates.view(24, batch.task.k, -1)[:1]
        .repeat(6, 1, 1)
        .reshape(-1, batch.candidates.shape[1]),
        batch.target[:1].repeat(6),
        batch.shuffled[:1].repeat(6, 1),
    )
    with torch.no_grad():
        rows = ablations(model, one)
    assert {kind for *_, kind, _, _ in rows} == {"zero", "mean", "sufficiency"}
    for _, _, kind, d_loss, _ in rows:
        if kind != "zero":
            assert abs(d_loss) < 1e-5, kind


def test_attention_to_z_is_a_fraction_of_the_first_prediction_query():
    model, batch = _setup()
    with torch.no_grad():
        a = attention_to_z(model, batch)
        assert a.shape == (model.spec.n_layers, model.spec.n_heads)
        assert ((a >= 0) & (a <= 1)).all() and (a > 0).any()
        # q = k = 0: every head attends uniformly over the query's causal prefix, so the
        # first-prediction query (position 10) puts 2 / 11 on the two z positions (8, 9)
        for block in model.blocks:
            block.attn.qkv.weight.zero_()
            block.attn.qkv.bias.zero_()
        uniform = attention_to_z(model, batch)
    assert (model.task.first_pred_pos, model.task.z_positions) == (10, (8, 9))
    torch.testing.assert_close(uniform, torch.full_like(uniform, 2 / 11))

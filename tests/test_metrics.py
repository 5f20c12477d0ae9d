import math

import numpy as np
import pytest
import torch
from torch import nn

from mbc.core.spec import VOCAB, TaskSpec
from mbc.training.data import build_dataset
from mbc.training.metrics import (
    candidate_loss_from_scores,
    derange_selectors,
    evaluate,
    fixed_contexts,
    make_eval_batch,
)


class Oracle(nn.Module):
    """A lookup model: knows each group's candidates; `use_z` decides if it knows which one.

    Without z it puts probability 1/K on each candidate's first character and then
    completes that candidate deterministically: the exact marginal solution.
    """

    def __init__(self, ds, use_z: bool):
        super().__init__()
        self.task, self.use_z = ds.task, use_z
        self.by_base = {
            tuple(ds.clean_tokens[i, 1:7].tolist()): int(ds.group[i]) for i in range(len(ds.group))
        }
        self.by_bz = {
            tuple(ds.clean_tokens[i, 1:10].tolist()): int(ds.target_index[i])
            for i in range(len(ds.group))
        }
        self.candidates = ds.candidates

    def forward(self, tokens):
        n = tokens.shape[0]
        out = torch.full((n, 5, VOCAB), -1e9, dtype=torch.float64)
        for i, row in enumerate(tokens.tolist()):
            cands = self.candidates[self.by_base[tuple(row[1:7])]]  # (K, 5)
            if self.use_z:
                cands = cands[self.by_bz[tuple(row[1:10])]].unsqueeze(0)
            for p in range(5):  # teacher forcing: candidates consistent with the prefix so far
                ok = (cands[:, :p] == torch.tensor(row[11 : 11 + p])).all(1)
                nxt = cands[ok, p] if ok.any() else cands[:, p]
                for tok in set(nxt.tolist()):
                    out[i, p, tok] = math.log((nxt == tok).double().mean())
        return out


@pytest.fixture(scope="module")
def ds():
    return build_dataset(TaskSpec(k=5, n_groups=8), seed=0)


def batch_for(ds):
    rng = np.random.default_rng(0)
    return make_eval_batch(ds, fixed_contexts(ds, 1000, rng), rng)


def test_model_ignoring_z_has_candidate_loss_exactly_log_k(ds):
    m = evaluate(Oracle(ds, use_z=False), batch_for(ds))
    assert m["candidate_loss"] == pytest.approx(math.log(5), abs=1e-12)
    assert m["first_target_loss"] == pytest.approx(math.log(5), abs=1e-9)
    assert m["delta_z"] == pytest.approx(0.0, abs=1e-12)


def test_model_using_z_has_zero_candidate_loss_and_positive_gap(ds):
    m = evaluate(Oracle(ds, use_z=True), batch_for(ds))
    assert m["candidate_loss"] == pytest.approx(0.0, abs=1e-9)
    assert m["candidate_accuracy"] == 1.0
    assert m["delta_z"] > 10  # wrong selector -> the true answer has ~zero probability


def test_uniform_model_is_log_k():
    scores = torch.zeros(7, 4)
    lcand, _ = candidate_loss_from_scores(scores, torch.arange(7) % 4)
    assert torch.allclose(
        lcand, torch.full((7,), math.log(4), dtype=torch.float64), atol=0, rtol=1e-15
    )


def test_candidate_loss_float64_renormalisation():
    # scores so large that float32 logsumexp would lose the difference
    scores = torch.tensor([[-1e4, -1e4 - 1e-3]], dtype=torch.float64)
    lcand, correct = candidate_loss_from_scores(scores, torch.tensor([1]))
    expected = -(-1e-3 - math.log(1 + math.exp(-1e-3)))
    assert lcand.item() == pytest.approx(expected, rel=1e-9)
    assert not correct.item()


@pytest.mark.parametrize("sharing", ["shared", "private"])
def test_derangement_leaves_no_example_with_its_own_z(sharing):
    ds = build_dataset(TaskSpec(k=3, n_groups=50, sharing=sharing), seed=1)
    ex = torch.arange(ds.tokens.shape[0])
    shuf = derange_selectors(ds, ex, np.random.default_rng(0))
    assert not (shuf[:, 8:10] == ds.clean_tokens[:, 8:10]).all(1).any()
    # the wrong selector is one of the same group's selectors, everything else unchanged
    own = ds.selectors[ds.selector_set[ds.group]]  # (D, K, 2)
    assert (own == shuf[:, None, 8:10]).all(2).any(1).all()
    keep = [i for i in range(16) if i not in (8, 9)]
    assert torch.equal(shuf[:, keep], ds.clean_tokens[:, keep])

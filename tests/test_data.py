import numpy as np
import pytest
import torch

from mbc.core.spec import BOS, CHAR0, EOS, SEP, TaskSpec
from mbc.training.data import build_dataset, stream_seed


def strings(t: torch.Tensor) -> list[tuple]:
    return [tuple(r) for r in t.tolist()]


@pytest.mark.parametrize("k,n_groups", [(2, 50), (5, 40), (36, 8)])
def test_generator_invariants(k, n_groups):
    task = TaskSpec(k=k, n_groups=n_groups)
    ds = build_dataset(task, seed=0)
    d = n_groups * k
    assert ds.tokens.shape == (d, 16) and task.d == d
    # layout: [BOS] B(6) [SEP] z(2) [SEP] A(4) [EOS]
    assert (ds.tokens[:, 0] == BOS).all() and (ds.tokens[:, 7] == SEP).all()
    assert (ds.tokens[:, 10] == SEP).all() and (ds.tokens[:, 15] == EOS).all()
    chars = ds.tokens[:, [*range(1, 7), 8, 9, *range(11, 15)]]
    assert (chars >= CHAR0).all()
    bases = ds.tokens[:, 1:7].view(n_groups, k, 6)
    assert (bases == bases[:, :1]).all(), "one base string per group"
    assert len(set(strings(bases[:, 0]))) == n_groups, "bases unique across groups"
    answers = ds.tokens[:, 11:15]
    assert len(set(strings(answers))) == d, "targets unique across the dataset"
    first = answers[:, 0].view(n_groups, k)
    assert all(len(set(row)) == k for row in first.tolist()), "distinct first chars per group"
    z = ds.tokens[:, 8:10].view(n_groups, k, 2)
    assert (z == z[:1]).all(), "shared selectors: one global list"
    assert len(set(strings(z[0]))) == k
    # candidates of each example's group hold its answer at target_index
    cand = ds.candidates[ds.group, ds.target_index]
    assert torch.equal(cand, ds.tokens[:, 11:16])


def test_same_seed_same_data_different_seed_differs():
    task = TaskSpec(k=5, n_groups=30)
    a, b, c = build_dataset(task, 1), build_dataset(task, 1), build_dataset(task, 2)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)
    # one seed per (seed, stream) pair, (0, 1) and (1, 0) apart; repeatable; 63 bits
    pairs = [(1, 0), (1, 1), (2, 0), (0, 1), (0, 0)]
    assert len({stream_seed(*p) for p in pairs}) == len(pairs)
    assert stream_seed(1, 0) == stream_seed(1, 0) < 2**63


def test_sharing_variants():
    private = build_dataset(TaskSpec(k=4, n_groups=30, sharing="private"), 0)
    assert private.selectors.shape == (30, 4, 2)
    sup = build_dataset(TaskSpec(k=4, n_groups=30, sharing="supergroup", n_supergroups=3), 0)
    assert sup.selectors.shape == (3, 4, 2)
    assert np.bincount(sup.selector_set.numpy()).tolist() == [10, 10, 10]
    z = sup.tokens[:, 8:10].view(30, 4, 2)
    for g in range(30):
        assert torch.equal(z[g], sup.selectors[sup.selector_set[g]])


def test_label_noise_replaces_within_group_and_keeps_clean_copy():
    ds = build_dataset(TaskSpec(k=5, n_groups=400, label_noise=0.2), 0)
    changed = (ds.tokens != ds.clean_tokens).any(1)
    assert 0.15 < changed.float().mean() < 0.25
    group_answers = ds.candidates[ds.group]  # (D, K, 5)
    noisy = ds.tokens[changed, 11:16]
    assert all((group_answers[changed][i] == noisy[i]).all(1).any() for i in range(len(noisy)))
    assert torch.equal(ds.tokens[~changed], ds.clean_tokens[~changed])


@pytest.mark.parametrize("z_length", [1, 3, 4])
def test_selector_length(z_length):
    ds = build_dataset(TaskSpec(k=10, n_groups=5, z_length=z_length), 0)
    assert ds.tokens.shape[1] == 14 + z_length
    assert (ds.tokens[:, 8 + z_length] == SEP).all()


def test_a_to_b_direction_candidates_hold_truth():
    task = TaskSpec(k=4, n_groups=10, direction="a_to_b")
    ds = build_dataset(task, 0)
    assert ds.tokens.shape == (40, 13) and task.n_targets == 7
    truth = ds.tokens[:, -7:]
    assert torch.equal(ds.candidates[ds.group, ds.target_index], truth)
    # candidates of a group are distinct bases
    for g in range(10):
        assert len(set(strings(ds.candidates[g]))) == 4


def test_az_to_b_is_the_authors_reverse_task():
    """[BOS] A [SEP] z [SEP] B [EOS]: A and z in, B out; z is the selector of (g, k)."""
    task = TaskSpec(k=4, n_groups=10, direction="az_to_b")
    ds = build_dataset(task, 0)
    fwd = build_dataset(TaskSpec(k=4, n_groups=10), 0)
    assert ds.tokens.shape == (40, 16) and task.n_targets == 7 and task.first_pred_pos == 8
    assert task.z_positions == (6, 7)
    t = ds.tokens
    assert (t[:, 0] == BOS).all() and (t[:, 5] == SEP).all() and (t[:, 8] == SEP).all()
    assert (t[:, -1] == EOS).all()
    # same draw as the forward task: A, z and B of each example swap places
    assert torch.equal(t[:, 1:5], fwd.tokens[:, 11:15])  # A
    assert torch.equal(t[:, 6:8], fwd.tokens[:, 8:10])  # z
    assert torch.equal(t[:, 9:15], fwd.tokens[:, 1:7])  # B
    assert torch.equal(ds.candidates[ds.group, ds.target_index], t[:, -7:])

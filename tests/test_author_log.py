"""The author's training-log series (mbc.training.author_log): per window of dense_every
steps, the running mean of the training batches' first-target loss and the last batch's
first-target loss with z deranged."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_spec

from mbc.training import author_log
from mbc.training.author_log import TrainWindows, shuffled_first_loss_fn
from mbc.training.data import build_dataset
from mbc.training.metrics import derange_selectors, training_loss
from mbc.training.packed import PackedRuns
from mbc.training.setup import initial_model
from mbc.training.train import train_run

CPU = torch.device("cpu")


def test_windows_running_mean_and_last_batch_gap_by_hand():
    w = TrainWindows(every=4)
    asked = []
    events = []
    for step, x in enumerate([1.0, 2.0, 3.0, 6.0, 10.0, 10.0, 10.0, 2.0], start=1):
        w.add(torch.tensor(x))
        e = w.close(step, lambda s: asked.append(s) or 100.0 + s)
        if e is not None:
            events.append(e)
    assert [e["step"] for e in events] == [4, 8] and asked == [4, 8]
    assert [e["train_first_loss"] for e in events] == [3.0, 8.0]  # (1+2+3+6)/4, (10*3+2)/4
    assert [e["train_first_shuffled_loss"] for e in events] == [104.0, 108.0]
    assert all(e["n_batches"] == 4 for e in events)
    table = author_log.table(events)
    assert table["delta_z_train_first"].tolist() == [101.0, 100.0]
    # a step without its loss (a trainer that does not hand it over): the window is NaN and
    # the shuffled loss is not computed; a view without the method: NaN gap
    w = TrainWindows(every=2)
    w.add(torch.tensor(1.0))
    w.add(None)
    e = w.close(2, lambda s: pytest.fail("not asked without a running mean"))
    assert math.isnan(e["train_first_loss"]) and math.isnan(e["train_first_shuffled_loss"])
    w.add(torch.tensor(1.0))
    w.add(torch.tensor(3.0))
    e = w.close(4, None)
    assert e["train_first_loss"] == 2.0 and math.isnan(e["train_first_shuffled_loss"])


def _alone(spec, ds):
    """A run stepped by hand through the one training step (a pack of one), and an ordinary
    model that `sync()` loads with its current weights."""
    pack = PackedRuns([spec], [ds], CPU, ordinary=True)
    model = initial_model(spec)

    def sync():
        model.load_state_dict(pack.weights(0))
        return model

    return pack, sync


def test_the_step_returns_its_loss_and_the_first_target_ce_of_the_same_logits():
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    pack, sync = _alone(spec, ds)
    x = ds.tokens[pack.orders[0].indices(1)]
    model = sync()  # the weights before the step
    loss, first = pack.step()
    assert torch.equal(loss[0], training_loss(model, x).detach())  # a run alone: bitwise
    n_t = spec.task.n_targets
    want = torch.nn.functional.cross_entropy(model(x)[:, 0], x[:, -n_t])
    torch.testing.assert_close(first[0], want.detach())
    assert not first.requires_grad and not loss.requires_grad


def test_train_run_logs_the_windows_as_a_replay_computes_them(tmp_path):
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    train_run(spec, ds, tmp_path, CPU, say=lambda s: None)
    got = pd.read_csv(tmp_path / author_log.FILE)
    every = spec.eval.dense_every
    assert got.step.tolist() == list(range(every, spec.train.max_steps + 1, every))
    assert (got.n_batches == every).all()
    # replay: the same run stepped by hand, each step's first-target CE recomputed
    pack, sync = _alone(spec, ds)
    shuffled = shuffled_first_loss_fn(spec, ds, pack.orders[0].indices, sync())
    firsts, gaps = [], {}
    n_t = spec.task.n_targets
    for s in range(1, spec.train.max_steps + 1):
        x = ds.tokens[pack.orders[0].indices(s)]
        with torch.no_grad():
            logits = sync()(x)
            firsts.append(float(torch.nn.functional.cross_entropy(logits[:, 0], x[:, -n_t])))
        pack.step()
        if s % every == 0:
            sync()
            gaps[s] = shuffled(s)
    means = np.array(firsts).reshape(-1, every).mean(axis=1)
    np.testing.assert_allclose(got.train_first_loss, means, rtol=1e-5)
    np.testing.assert_allclose(
        got.train_first_shuffled_loss, [gaps[s] for s in got.step], rtol=1e-6
    )
    np.testing.assert_allclose(
        got.delta_z_train_first, got.train_first_shuffled_loss - means, rtol=1e-4
    )


def test_shuffled_batch_is_the_training_batch_with_every_z_wrong():
    spec = tiny_spec(label_noise=0.3)
    ds = build_dataset(spec.task, spec.seed)
    pack, sync = _alone(spec, ds)
    order, model = pack.orders[0], sync()
    seen = {}

    def capture(model, seqs):
        seen["seqs"] = seqs
        return 0.0

    import mbc.training.author_log as tl

    orig = tl.first_target_loss
    tl.first_target_loss = capture
    try:
        shuffled_first_loss_fn(spec, ds, order.indices, model)(7)
    finally:
        tl.first_target_loss = orig
    idx = order.indices(7)
    clean = ds.tokens[idx]
    got = seen["seqs"]
    z = list(spec.task.z_positions)
    n_t = spec.task.n_targets
    assert torch.equal(got[:, -n_t:], clean[:, -n_t:])  # the training targets (noisy ones too)
    assert (got[:, z] != clean[:, z]).any(dim=1).all()  # no example keeps its own z
    others = [i for i in range(clean.shape[1]) if i not in z]
    assert torch.equal(got[:, others], clean[:, others])
    assert shuffled_first_loss_fn(tiny_spec(direction="a_to_b"), ds, order.indices, model) is None


def test_resumed_run_logs_the_same_windows(tmp_path):
    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    train_run(spec, ds, tmp_path / "full", CPU, say=lambda s: None)
    train_run(spec, ds, tmp_path / "cut", CPU, say=lambda s: None, stop_after=70)
    train_run(spec, ds, tmp_path / "cut", CPU, say=lambda s: None)
    a, b = (pd.read_csv(tmp_path / d / author_log.FILE) for d in ("full", "cut"))
    pd.testing.assert_frame_equal(a, b)


def test_his_batch_shuffle_moves_every_z_to_another_row_and_nothing_else():
    """`shuffle_z_across_batch` (his `shuffle_z_in_batch`): a permutation of the batch with
    no fixed point, applied to the z positions only."""
    n, z = 64, [3, 4]
    tokens = torch.arange(n * 8).reshape(n, 8)  # every row's z is its own, distinct
    rng = np.random.default_rng(0)
    for _ in range(20):
        got = author_log.shuffle_z_across_batch(tokens, z, rng)
        assert (got[:, z] != tokens[:, z]).all()  # no row keeps its own z
        rows = {tuple(r) for r in got[:, z].tolist()}
        assert rows == {tuple(r) for r in tokens[:, z].tolist()}  # a permutation of the rows
        others = [i for i in range(8) if i not in z]
        assert torch.equal(got[:, others], tokens[:, others])


def test_with_shared_selectors_about_one_in_k_get_their_own_z_back_his_way_never_ours():
    """Why his z-shuffle gap is smaller than ours: selectors are shared across groups, so the
    z of another example is this example's own z about 1/K of the time."""
    spec = tiny_spec(k=4, n_groups=500)  # shared selectors (the default task)
    ds = build_dataset(spec.task, spec.seed)
    z = list(spec.task.z_positions)
    idx = torch.arange(2000)
    clean = ds.tokens[idx]
    his = author_log.shuffle_z_across_batch(clean, z, np.random.default_rng(1))
    same = (his[:, z] == clean[:, z]).all(dim=1).float().mean().item()
    assert abs(same - 1 / 4) < 0.04, same  # 2,000 draws: 4 standard errors
    ours = derange_selectors(ds, idx, np.random.default_rng(1), tokens=ds.tokens)
    assert not (ours[:, z] == clean[:, z]).all(dim=1).any()


def test_a_run_logs_his_shuffle_beside_ours_and_the_logged_lead_reads_his(tmp_path):
    from mbc.diagnostics.config_sections import Lead
    from mbc.diagnostics.logged import logged_lead

    spec = tiny_spec()
    ds = build_dataset(spec.task, spec.seed)
    train_run(spec, ds, tmp_path, CPU, say=lambda s: None)
    got = pd.read_csv(tmp_path / author_log.FILE)
    assert np.isfinite(got.train_first_batch_shuffled_loss).all()
    np.testing.assert_allclose(
        got.delta_z_train_first_batch, got.train_first_batch_shuffled_loss - got.train_first_loss
    )
    lead = Lead(delta_z_onset=0.1, loss_onset_fraction=0.9)
    assert logged_lead(got, spec.task.log_k, lead)["lead_log_shuffle"] == "batch"
    # planted: his gap opens at step 40, ours at 20; the lead reads his where logged
    steps = np.arange(1, 7) * 10
    log = pd.DataFrame(
        {
            "step": steps,
            "train_first_loss": [1.1, 1.1, 1.1, 1.1, 0.5, 0.1],
            "delta_z_train_first": [0, 0.5, 0.5, 0.5, 0.5, 0.5],
            "delta_z_train_first_batch": [0, 0, 0, 0.5, 0.5, 0.5],
        }
    )
    his = logged_lead(log, 1.1, lead)
    assert (his["log_delta_z_onset"], his["lead_log_shuffle"]) == (40, "batch")
    older = logged_lead(log.drop(columns="delta_z_train_first_batch"), 1.1, lead)
    assert (older["log_delta_z_onset"], older["lead_log_shuffle"]) == (20, "deranged")
    # resumed under the new trainer: his series only from step 30, after his gap opened at
    # 20; reading it would move the onset to 30, so ours is read, and said
    partly = log.assign(delta_z_train_first_batch=[np.nan, np.nan, 0.5, 0.5, 0.5, 0.5])
    mixed = logged_lead(partly, 1.1, lead)
    assert (mixed["log_delta_z_onset"], mixed["lead_log_shuffle"]) == (20, "deranged")

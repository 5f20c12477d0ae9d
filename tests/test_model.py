import pytest
import torch

from mbc.core.spec import VOCAB, ModelSpec, TaskSpec
from mbc.training.data import build_dataset
from mbc.training.model import LinearBaseline, Transformer, build_model, count_parameters


def test_parameter_count_paper_model():
    d, mlp, vocab, pos, layers = 128, 512, 40, 32, 4
    emb = vocab * d + pos * d
    ln = 2 * d
    attn = d * 3 * d + 3 * d + d * d + d
    mlp_p = d * mlp + mlp + mlp * d + d
    block = ln + attn + ln + mlp_p
    unembed = d * vocab + vocab
    expected = emb + layers * block + ln + unembed
    assert expected == 807_720
    model = Transformer(ModelSpec(), TaskSpec())
    assert count_parameters(model) == expected


def _model(seed=0):
    task = TaskSpec(k=4, n_groups=10)
    spec = ModelSpec(n_layers=2, n_heads=2, d_model=16, d_mlp=32)
    return build_model(spec, task, torch.Generator().manual_seed(seed)), build_dataset(task, 0)


def test_logits_shape_and_causality():
    model, ds = _model()
    x = ds.tokens[:8]
    out = model(x)
    assert out.shape == (8, 5, VOCAB)
    y = x.clone()
    y[:, 12:] = 5  # change later target tokens: the first prediction must not move
    assert torch.allclose(model(y)[:, :2], out[:, :2], atol=1e-6)
    assert not torch.allclose(model(y)[:, 2:], out[:, 2:])


def test_forward_equals_the_textbook_forward_at_every_position_choice():
    """The pruned forward (last block at the target positions only, keys-first attention on
    CPU) and all_positions=True compute the textbook transformer."""
    from reference_model import reference_logits

    model, ds = _model()
    x = ds.tokens[:8]
    with torch.no_grad():
        want = reference_logits(model, x)
        torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)
        full = model(x, all_positions=True)
    assert full.shape == (8, 15, VOCAB)
    torch.testing.assert_close(full[:, model.task.first_pred_pos :], want, rtol=1e-5, atol=1e-5)


def test_hook_z_replaces_head_outputs_as_a_zero_ablation_does():
    from reference_model import reference_logits

    model, ds = _model()
    x = ds.tokens[:8]
    seen = []
    with torch.no_grad():
        same = model(x, hooks={"blocks.0.attn.hook_z": lambda z: seen.append(z.shape)})
        assert torch.equal(same, model(x)) and seen == [(8, 2, 15, 8)]  # read-only hook

        def zero_head1(z):
            z = z.clone()
            z[:, 1] = 0
            return z

        for layer in (0, 1):  # the last layer's z holds only the target positions' rows
            scale = torch.ones(2, 2)
            scale[layer, 1] = 0
            got = model(x, hooks={f"blocks.{layer}.attn.hook_z": zero_head1})
            torch.testing.assert_close(got, reference_logits(model, x, scale), rtol=1e-5, atol=1e-5)
            assert not torch.allclose(got, model(x))


def test_hook_pattern_gives_causal_distributions():
    model, ds = _model()
    pats = []
    hooks = {f"blocks.{i}.attn.hook_pattern": pats.append for i in range(2)}
    with torch.no_grad():
        plain = model(ds.tokens[:4], all_positions=True)
        hooked = model(ds.tokens[:4], hooks=hooks, all_positions=True)
    assert torch.equal(plain, hooked)  # asking for the pattern changes nothing on the CPU
    assert len(pats) == 2 and pats[0].shape == (4, 2, 15, 15)
    assert torch.allclose(pats[0].sum(-1), torch.ones(4, 2, 15), atol=1e-5)
    assert (pats[0].triu(1) == 0).all()


def test_init_is_seeded_not_global():
    a, _ = _model(1)
    torch.manual_seed(123)
    b, _ = _model(1)
    c, _ = _model(2)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_linear_baseline_is_w2_w1_of_one_hot_b_and_z():
    task = TaskSpec(k=4, n_groups=10)
    m = LinearBaseline(ModelSpec(linear_hidden=16), task)
    x = build_dataset(task, 0).tokens[:3]
    out = m(x)
    assert out.shape == (3, 5, VOCAB)
    # [BOS] B(6) [SEP] z(2) [SEP] A(4) [EOS]: B at 1-6 and z at 8-9 are all it reads
    one_hot = torch.nn.functional.one_hot(x[:, [1, 2, 3, 4, 5, 6, 8, 9]], VOCAB).flatten(1)
    with torch.no_grad():
        want = m.w2(m.w1(one_hot.float())).view(3, 5, VOCAB)
    torch.testing.assert_close(out, want)
    y = x.clone()
    y[:, 11:] = x[0, 11:]  # the targets play no part
    assert torch.equal(m(y), out)


def _identity_baseline(k=4, n_groups=10, hidden=16):
    from mbc.core.spec import RunSpec
    from mbc.training.setup import initial_model

    task = TaskSpec(k=k, n_groups=n_groups)
    spec = RunSpec(
        task=task, model=ModelSpec(kind="linear", linear_hidden=hidden, linear_input="identity")
    )
    return initial_model(spec), build_dataset(task, spec.seed)


def test_identity_linear_baseline_reads_b_as_one_symbol():
    """linear_input identity: e_B is one-hot over the dataset's B strings, in the dataset's
    group order (its run's `initial_model` fills them), then e_z per character."""
    m, ds = _identity_baseline()
    x = ds.tokens[::7]
    e_b = torch.nn.functional.one_hot(ds.group[::7], 10)
    e_z = torch.nn.functional.one_hot(x[:, [8, 9]], VOCAB).flatten(1)
    with torch.no_grad():
        want = m.w2(m.w1(torch.cat([e_b, e_z], 1).float())).view(-1, 5, VOCAB)
    torch.testing.assert_close(m(x), want)
    assert m.w1.in_features == 10 + 2 * VOCAB
    assert "bases" in m.state_dict()  # saved with the weights: a snapshot rebuilds it


def test_a_z_blind_identity_baseline_storing_each_marginal_sits_at_log_k():
    """The known answer E13's row tests: weights that map B to its group's K first
    characters (uniformly) and ignore z give a first-target loss of exactly log K, as the
    package's evaluation reads it, and z changes nothing."""
    import math

    import numpy as np

    from mbc.training.metrics import evaluate, fixed_contexts, make_eval_batch

    m, ds = _identity_baseline(k=4, n_groups=10, hidden=16)
    first = ds.candidates[:, :, 0]  # (groups, K) distinct first characters
    with torch.no_grad():
        m.w1.weight.zero_()
        m.w1.weight[:10, :10] = torch.eye(10)  # hidden unit g <- e_B of group g
        m.w2.weight.zero_()
        for g in range(10):
            m.w2.weight[first[g], g] = 60.0  # target 0's logits: its K first characters
    rng = np.random.default_rng(0)
    out = evaluate(m, make_eval_batch(ds, fixed_contexts(ds, 40, rng), rng))
    assert out["first_target_loss"] == pytest.approx(math.log(4), abs=1e-6)  # float32 logits
    assert out["delta_z_first"] == pytest.approx(0.0, abs=1e-6)


def _weights_and_biases(model):
    params = {n: p.detach() for n, p in model.named_parameters()}
    mats = {n: p for n, p in params.items() if n.endswith("weight") and p.dim() == 2}
    biases = {n: p for n, p in params.items() if n.endswith("bias") and "ln" not in n}
    norms = {n: p for n, p in params.items() if "ln" in n}
    return mats, biases, norms


def test_paper_model_init_is_the_authors_transformer_lens_rule():
    """Every weight matrix N(0, 0.8 / sqrt(d_model)) = 0.0707 at d_model 128, embeddings and
    unembedding included; biases 0; LayerNorm weight 1, bias 0 (docs/method.md#initialisation)."""
    task = TaskSpec(k=10, n_groups=1000)
    model = build_model(ModelSpec(), task, torch.Generator().manual_seed(0))
    mats, biases, norms = _weights_and_biases(model)
    want = 0.8 / 128**0.5
    names = {
        "tok_emb.weight",
        "pos_emb.weight",
        "unembed.weight",
        "blocks.0.attn.qkv.weight",
        "blocks.3.attn.out.weight",
        "blocks.0.mlp.0.weight",
        "blocks.3.mlp.2.weight",
    }
    assert names <= set(mats)
    assert len(mats) == 2 + 1 + 4 * 4  # embeddings, unembedding, 4 matrices per block
    for name, w in mats.items():
        # the sample std of n >= 5120 normal draws is within 4% of sigma (> 6 standard errors)
        assert abs(float(w.std()) / want - 1) < 0.04, name
        assert abs(float(w.mean())) < 4 * want / w.numel() ** 0.5, name
    # W_Q, W_K, W_V alike (fused qkv: thirds of one matrix)
    for third in model.blocks[0].attn.qkv.weight.detach().chunk(3):
        assert abs(float(third.std()) / want - 1) < 0.04
    assert all(float(b.abs().max()) == 0 for b in biases.values())
    assert len(biases) == 4 * 4 + 1  # qkv, out, mlp in/out per block; unembedding
    for name, p in norms.items():
        assert torch.equal(
            p, torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
        )


def test_quick_model_init_std_is_0_1_and_normal_scheme_is_0_02():
    task = TaskSpec(k=5, n_groups=100)
    quick = ModelSpec(n_layers=2, d_model=64, d_mlp=256)
    assert quick.weight_std == 0.1
    model = build_model(quick, task, torch.Generator().manual_seed(1))
    w = model.blocks[1].mlp[0].weight.detach()
    assert abs(float(w.std()) / 0.1 - 1) < 0.04
    old = ModelSpec(init="normal")
    assert old.weight_std == 0.02
    w = build_model(old, task, torch.Generator().manual_seed(1)).unembed.weight.detach()
    assert abs(float(w.std()) / 0.02 - 1) < 0.1  # 40 x 128 draws
    assert ModelSpec(init_std=0.05).weight_std == 0.05


def test_linear_baseline_init_uses_its_hidden_width():
    task = TaskSpec(k=5, n_groups=100)
    spec = ModelSpec(kind="linear", linear_hidden=256)
    model = build_model(spec, task, torch.Generator().manual_seed(0))
    for lin in (model.w1, model.w2):
        assert abs(float(lin.weight.detach().std()) / (0.8 / 16) - 1) < 0.04
        assert float(lin.bias.detach().abs().max()) == 0

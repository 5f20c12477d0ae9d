"""The author's model for the benchmark: TransformerLens' `HookedTransformer` (the 3.x series,
the last with it), configured as the paper's (docs/method.md#model), with our initial
weights copied in, so that one benchmark times both on the same batches.

The author trained it the TransformerLens way: logits at every position, the loss on the
target positions, `torch.optim.AdamW`. `pip install -e ".[bench]"` installs it; without it
`available()` is False and the benchmark says it skipped this comparison.
"""

from __future__ import annotations

import torch

from mbc.core.spec import VOCAB, ModelSpec

UNAVAILABLE: list[str] = []  # why transformer_lens did not import, once known


def available() -> bool:
    """Whether transformer_lens imports; any failure (not installed, or a dependency of
    another version, as on a device image) makes the benchmark skip the author's model."""
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        UNAVAILABLE[:] = [f"{type(exc).__name__}: {exc}"]
        return False
    return True


def build(spec: ModelSpec, ours: dict[str, torch.Tensor], device) -> torch.nn.Module:
    """A HookedTransformer of `spec`'s shape holding the weights of our state dict `ours`."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=spec.n_layers, d_model=spec.d_model, n_ctx=spec.n_positions,
        d_head=spec.d_head, n_heads=spec.n_heads, d_mlp=spec.d_mlp, d_vocab=VOCAB,
        act_fn="gelu", normalization_type="LN", init_mode="gpt2", device=str(device),
    )  # fmt: skip
    model = HookedTransformer(cfg)
    missing, unexpected = model.load_state_dict(to_author(spec, ours), strict=False)
    buffers = {name for name, _ in model.named_buffers()}  # the causal mask and its fill
    if unexpected or set(missing) - buffers:
        raise RuntimeError(f"weights do not map: missing {missing}, unexpected {unexpected}")
    return model.to(device).train()


def to_author(spec: ModelSpec, ours: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our parameter layout -> TransformerLens': the fused qkv split per head into W_Q, W_K,
    W_V (n_heads, d_model, d_head); W_O (n_heads, d_head, d_model); W_in, W_out, W_U
    transposed (TransformerLens multiplies x @ W)."""
    h, dh, d = spec.n_heads, spec.d_head, spec.d_model
    out = {
        "embed.W_E": ours["tok_emb.weight"],
        "pos_embed.W_pos": ours["pos_emb.weight"],
        "ln_final.w": ours["ln_f.weight"],
        "ln_final.b": ours["ln_f.bias"],
        "unembed.W_U": ours["unembed.weight"].T,
        "unembed.b_U": ours["unembed.bias"],
    }
    for i in range(spec.n_layers):
        b, a = f"blocks.{i}.", f"blocks.{i}.attn."
        w, bias = ours[f"{b}attn.qkv.weight"], ours[f"{b}attn.qkv.bias"]
        for j, name in enumerate("QKV"):
            out[f"{a}W_{name}"] = w[j * d : (j + 1) * d].view(h, dh, d).transpose(1, 2)
            out[f"{a}b_{name}"] = bias[j * d : (j + 1) * d].view(h, dh)
        out[f"{a}W_O"] = ours[f"{b}attn.out.weight"].T.reshape(h, dh, d)
        out[f"{a}b_O"] = ours[f"{b}attn.out.bias"]
        out[f"{b}mlp.W_in"] = ours[f"{b}mlp.0.weight"].T
        out[f"{b}mlp.b_in"] = ours[f"{b}mlp.0.bias"]
        out[f"{b}mlp.W_out"] = ours[f"{b}mlp.2.weight"].T
        out[f"{b}mlp.b_out"] = ours[f"{b}mlp.2.bias"]
        for ln in ("ln1", "ln2"):
            out[f"{b}{ln}.w"] = ours[f"{b}{ln}.weight"]
            out[f"{b}{ln}.b"] = ours[f"{b}{ln}.bias"]
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def logits(model: torch.nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """The author's forward: logits at every input position (n, T-1, vocab); he trained on
    the target positions' cross-entropy."""
    return model(seqs[:, :-1], return_type="logits")

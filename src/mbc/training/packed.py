"""Packed training: R runs with identical shapes trained as one stacked model (for GPUs).

A paper-size step (batch 128 x 15 positions, d_model 128) is far too small to fill a GPU:
one run is bound by kernel-launch latency, not FLOPs. Packing R runs turns every
matmul into one `torch.baddbmm` over R stacked weight matrices (and attention into one
call over R * batch sequences), so a step of R runs costs about the launches of one.
`PackedTransformer.forward` is a batched view of `mbc.training.model.Transformer.forward`: the same
steps (the last block at the target positions only, `mbc.training.model.attend`) over R stacked
weight sets.

Each run keeps its own everything: initial weights (drawn exactly as `mbc.training.train` draws
them, from the run's STREAM_INIT), dataset and batch order (`BatchOrder` of its own seed
and D), and AdamW state. The runs only share kernels. The loss of the packed model is the
sum of the R per-run mean losses, so run r's gradient is exactly its own. AdamW is
elementwise, so one optimiser over the stacked tensors is R independent optimisers; when
the runs' hyperparameters differ (an lr sweep) a per-run-broadcast AdamW is used.

What may differ between packed runs: seed, dataset (K, n_groups, sharing, label noise),
lr, weight decay, betas, eps. What must agree: the model spec, the sequence layout
(direction, z_length) and the batch size. `export_run` turns run r back into an ordinary
`Transformer` + `torch.optim.AdamW` pair (for `mbc.training.metrics.evaluate`, snapshots, resume
files), identical in format to what `mbc.training.train.train_run` saves.

Matches independent runs to float32 rounding (tests/test_packed.py); it does not claim
bitwise equality, since batched and unbatched matmuls may sum in different orders.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mbc.core.spec import RunSpec
from mbc.training.data import STREAM_INIT, Dataset, stream_seed
from mbc.training.model import Transformer, attend, build_model, use_sdpa
from mbc.training.schedule import BatchOrder
from mbc.training.train import make_optimizer


def _key(name: str) -> str:
    return name.replace(".", "__")


class PackedTransformer(nn.Module):
    """R `mbc.training.model.Transformer`s of one shape; parameter `a.b` is stored as `a__b` (R, ...)."""

    def __init__(self, models: list[Transformer]):
        super().__init__()
        if not models:
            raise ValueError("need at least one model")
        first = models[0]
        for m in models:
            if not isinstance(m, Transformer):
                raise TypeError("packing is implemented for the transformer only")
            if m.spec != first.spec or (m.task.seq_len, m.task.n_targets) != (
                first.task.seq_len,
                first.task.n_targets,
            ):
                raise ValueError("packed runs must share the model spec and sequence layout")
        self.spec, self.task, self.r = first.spec, first.task, len(models)
        self.names = [n for n, _ in first.named_parameters()]
        states = [dict(m.named_parameters()) for m in models]
        for n in self.names:
            stacked = torch.stack([s[n].detach() for s in states]).clone()
            self.register_parameter(_key(n), nn.Parameter(stacked))

    def p(self, name: str) -> torch.Tensor:
        return getattr(self, _key(name))

    def state_dict_of(self, r: int) -> dict[str, torch.Tensor]:
        """Run r's weights as an ordinary `Transformer` state dict (detached copies)."""
        return {n: self.p(n)[r].detach().clone() for n in self.names}

    # -- batched building blocks: x is (R, n, t, features)
    def _linear(self, x: torch.Tensor, name: str, rows: slice | None = None) -> torch.Tensor:
        w, b = self.p(f"{name}.weight"), self.p(f"{name}.bias")
        if rows is not None:
            w, b = w[:, rows], b[:, rows]
        r, n, t, f = x.shape
        y = torch.baddbmm(b.unsqueeze(1), x.reshape(r, n * t, f), w.transpose(1, 2))
        return y.view(r, n, t, -1)

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self.p(f"{name}.weight"), self.p(f"{name}.bias")
        return torch.addcmul(b[:, None, None], F.layer_norm(x, x.shape[-1:]), w[:, None, None])

    def _heads(self, y: torch.Tensor) -> torch.Tensor:
        r, n, t, d = y.shape
        h = self.spec.n_heads
        return y.reshape(r * n, t, h, d // h).transpose(1, 2)

    def _merge(self, z: torch.Tensor, r: int) -> torch.Tensor:
        rn, h, t, dh = z.shape
        return z.transpose(1, 2).reshape(r, rn // r, t, h * dh)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (R, n, T) -> logits (R, n, n_targets, vocab) at the target positions."""
        r, n, _ = tokens.shape
        if r != self.r:
            raise ValueError(f"expected {self.r} runs, got tokens for {r}")
        d, p = self.spec.d_model, self.task.first_pred_pos
        sdpa = use_sdpa(tokens.device)
        x_in = tokens[:, :, :-1]
        t = x_in.shape[2]
        emb = self.p("tok_emb.weight")  # (R, V, d)
        vocab = emb.shape[1]
        offsets = (torch.arange(r, device=tokens.device) * vocab).view(r, 1, 1)
        x = F.embedding(x_in + offsets, emb.reshape(r * vocab, d))
        x = x + self.p("pos_emb.weight")[:, None, :t]
        last = self.spec.n_layers - 1
        for i in range(self.spec.n_layers):
            b = f"blocks.{i}"
            y = self._ln(x, f"{b}.ln1")
            if i < last:
                q, k, v = (self._heads(u) for u in self._linear(y, f"{b}.attn.qkv").split(d, -1))
                off = 0
            else:  # only positions p.. reach the loss: queries, out-proj and MLP there only
                q = self._heads(self._linear(y[:, :, p:], f"{b}.attn.qkv", slice(0, d)))
                kv = self._linear(y, f"{b}.attn.qkv", slice(d, 3 * d))
                k, v = (self._heads(u) for u in kv.split(d, -1))
                x, off = x[:, :, p:], p
            z, _ = attend(q, k, v, off, sdpa)
            x = x + self._linear(self._merge(z, r), f"{b}.attn.out")
            hid = F.gelu(self._linear(self._ln(x, f"{b}.ln2"), f"{b}.mlp.0"))
            x = x + self._linear(hid, f"{b}.mlp.2")
        if self.spec.n_layers == 0:
            x = x[:, :, p:]
        return self._linear(self._ln(x, "ln_f"), "unembed")

    def losses(self, tokens: torch.Tensor) -> torch.Tensor:
        """Per-run training loss (R,): `mbc.training.metrics.training_loss` of each run."""
        n_t = self.task.n_targets
        logits = self.forward(tokens).float()
        r, n = tokens.shape[:2]
        ce = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tokens[:, :, -n_t:].reshape(-1), reduction="none"
        )
        return ce.view(r, n * n_t).mean(dim=1)


class PackedAdamW:
    """AdamW over stacked (R, ...) tensors with per-run hyperparameters.

    The same update as `torch.optim.AdamW` (decoupled decay, bias correction), written
    with broadcasting so that run r uses lr[r], weight_decay[r], betas[r], eps[r].
    """

    def __init__(self, params, lr, betas, eps, weight_decay):
        self.params = list(params)
        dev = self.params[0].device
        col = lambda v: torch.as_tensor(v, dtype=torch.float64, device=dev)  # noqa: E731
        self.lr, self.eps, self.wd = col(lr), col(eps), col(weight_decay)
        self.b1, self.b2 = col([b[0] for b in betas]), col([b[1] for b in betas])
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None if set_to_none else (p.grad.zero_() if p.grad is not None else None)

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        t = self.t
        bc1 = 1 - self.b1**t
        bc2_sqrt = (1 - self.b2**t).sqrt()
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue

            def f(x: torch.Tensor, p: torch.Tensor = p) -> torch.Tensor:
                return x.to(p.dtype).view((-1,) + (1,) * (p.dim() - 1))

            g = p.grad
            p.mul_(f(1 - self.lr * self.wd))
            m.lerp_(g, f(1 - self.b1))
            v.mul_(f(self.b2)).addcmul_(g * g, f(1 - self.b2))
            denom = (v.sqrt() / f(bc2_sqrt)).add_(f(self.eps))
            p.add_(m / denom * f(-self.lr / bc1))

    def run_state(self, r: int) -> dict[int, dict[str, torch.Tensor]]:
        return {
            i: {
                "step": torch.tensor(float(self.t)),
                "exp_avg": m[r].clone(),
                "exp_avg_sq": v[r].clone(),
            }
            for i, (m, v) in enumerate(zip(self.m, self.v, strict=True))
        }


def _hparams(spec: RunSpec) -> tuple:
    t = spec.train
    return (t.lr, t.beta1, t.beta2, t.eps, t.weight_decay)


class PackedRuns:
    """R runs (specs + their datasets) stepped together; `step()` returns their losses (R,)."""

    def __init__(self, specs: list[RunSpec], datasets: list[Dataset], device: torch.device):
        if len(specs) != len(datasets):
            raise ValueError("one dataset per spec")
        if len({s.train.batch_size for s in specs}) != 1:
            raise ValueError("packed runs must share the batch size")
        for s in specs:  # what PackedAdamW implements: a constant lr without clipping
            if s.train.schedule != "constant" or s.train.clip_norm > 0:
                raise ValueError(
                    f"{s.run_id}: packed runs support train.schedule constant without "
                    "train.clip_norm only"
                )
        self.specs, self.device = list(specs), device
        models = [
            build_model(
                s.model, s.task, torch.Generator().manual_seed(stream_seed(s.seed, STREAM_INIT))
            )
            for s in specs
        ]
        self.model = PackedTransformer(models).to(device).train()
        self.params = params = [self.model.p(n) for n in self.model.names]
        if len({_hparams(s) for s in specs}) == 1:
            # identical hyperparameters: torch's own (fused) AdamW over the stacked tensors
            self.opt = make_optimizer(_ParamList(params), specs[0], device)
        else:
            self.opt = PackedAdamW(
                params,
                lr=[s.train.lr for s in specs],
                betas=[(s.train.beta1, s.train.beta2) for s in specs],
                eps=[s.train.eps for s in specs],
                weight_decay=[s.train.weight_decay for s in specs],
            )
        self.tokens = [ds.tokens.to(device) for ds in datasets]
        b = specs[0].train.batch_size
        self.orders = [
            BatchOrder(t.shape[0], b, s.seed, device)
            for s, t in zip(specs, self.tokens, strict=True)
        ]
        same_d = len({t.shape[0] for t in self.tokens}) == 1
        self._stacked = torch.stack(self.tokens) if same_d else None
        self.step_count = 0

    @property
    def r(self) -> int:
        return self.model.r

    def batch(self, step: int) -> torch.Tensor:
        """(R, B, T) tokens of 1-based `step`: each run's own `BatchOrder`."""
        idx = [o.indices(step) for o in self.orders]
        if self._stacked is not None:
            rows = torch.arange(self.r, device=self.device).unsqueeze(1)
            return self._stacked[rows, torch.stack(idx)]
        return torch.stack([t[i] for t, i in zip(self.tokens, idx, strict=True)])

    def step(self) -> torch.Tensor:
        self.step_count += 1
        losses = self.model.losses(self.batch(self.step_count))
        self.opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.opt.step()
        return losses.detach()

    def grad_norms(self) -> torch.Tensor:
        """Per-run global gradient norm (R,) of the last step, as `mbc.training.train` logs it."""
        sq = [p.grad.flatten(1).pow(2).sum(1) for p in self.params if p.grad is not None]
        return torch.stack(sq).sum(0).sqrt()

    def export_run(self, r: int) -> tuple[Transformer, torch.optim.Optimizer]:
        """Run r as an ordinary (model, AdamW) pair, as `mbc.training.train.train_run` holds them."""
        spec = self.specs[r]
        model = build_model(spec.model, spec.task, torch.Generator().manual_seed(0))
        model.load_state_dict(self.model.state_dict_of(r))
        model.to(self.device).train()
        opt = make_optimizer(model, spec, self.device)
        if isinstance(self.opt, PackedAdamW):
            state = self.opt.run_state(r)
        else:
            state = {}
            for i, p in enumerate(self.params):
                s = self.opt.state.get(p)
                if s:
                    state[i] = {
                        "step": s["step"].detach().clone().cpu().float(),
                        "exp_avg": s["exp_avg"][r].clone(),
                        "exp_avg_sq": s["exp_avg_sq"][r].clone(),
                    }
        if state:
            sd = opt.state_dict()
            sd["state"] = state
            opt.load_state_dict(sd)
        return model, opt


class _ParamList(nn.Module):
    """Lets `mbc.training.train.make_optimizer` (which takes a module) build AdamW over given tensors."""

    def __init__(self, params: list[torch.Tensor]):
        super().__init__()
        self._params = params

    def parameters(self, recurse: bool = True):
        return iter(self._params)

"""The optimiser step of training: R >= 1 runs of one shape stepped as one stacked model.
A run trained alone is a pack of one (`mbc.training.train.train_run`, with the ordinary
model's arithmetic: `ordinary`, `mbc.training.step_math.OrdinaryStep`), so bf16, clipping,
the loss and the resume state are computed here for every run, packed or not.

A paper-size step (batch 128 x 15 positions, d_model 128) is far too small to fill a GPU:
one run is bound by kernel-launch latency, not FLOPs. Packing R runs turns every
matmul into one `torch.baddbmm` over R stacked weight matrices (and attention into one
call over R * batch sequences), so a step of R runs costs about the launches of one.
`PackedTransformer.forward` and `mbc.training.model.Transformer.forward` are one forward,
`mbc.training.forward.forward`, over R stacked weight sets or one run's.

Each run keeps its own everything: initial weights (`mbc.training.setup.initial_model`,
from the run's STREAM_INIT), dataset and batch order (`BatchOrder` of its own seed
and D), and AdamW state. The runs only share kernels. The loss of the packed model is the
sum of the R per-run mean losses, so run r's gradient is exactly its own. AdamW is
elementwise, so one optimiser over the stacked tensors is R independent optimisers; when
the runs' hyperparameters differ (an lr sweep) a per-run-broadcast AdamW is used.

What may differ between packed runs: seed, dataset (K, n_groups, sharing, label noise),
the init (scheme and std), the training regime (lr and its schedule, clipping, weight
decay, betas, eps, budget). What must agree (`mbc.core.packing.pack_key`): the model's
shape, the sequence layout (length, target positions), the batch size and the arithmetic
(precision, compile).
Each run's learning rate is `mbc.training.schedule.learning_rate` of its own spec, and
clipping clips each run's own global gradient norm. `export_run` turns run r back into an
ordinary `Transformer` + `torch.optim.AdamW` pair: the format of every resume point, which
any pack (of one or more) can start from (`states`).

A pack of R matches R packs of one to float32 rounding (tests/test_packed.py); it does not
claim bitwise equality, since batched and unbatched matmuls may sum in different orders.
"""

from __future__ import annotations

import copy
import functools
import sys
from typing import NamedTuple

import torch
from torch import nn

from mbc.core.packing import pack_key
from mbc.core.spec import RunSpec
from mbc.machine.probe import cxx_compiler
from mbc.training.data import BatchOrder, Dataset
from mbc.training.model import build_model
from mbc.training.packed_adamw import PackedAdamW
from mbc.training.packed_models import packed_model
from mbc.training.schedule import learning_rate
from mbc.training.setup import check_bases, check_train, initial_model, make_optimizer
from mbc.training.step_math import OrdinaryStep, StackedStep, StepMath


@functools.cache
def _without_cxx() -> bool:
    """No C++ compiler here for inductor's CPU kernels (a cluster node unlike the host that
    resolved train.compile): say so once and train eager, the same run (compile is not in
    run ids), instead of failing at the first step."""
    if cxx_compiler() is not None:
        return False
    print(
        "mbc: train.compile: no C++ compiler on this machine (set CXX or install g++): "
        "training eager",
        file=sys.stderr,
    )
    return True


class Step(NamedTuple):
    """What one optimiser step returns, per run (R,), detached: the training loss and the
    batch's first-target loss from the same logits (the training log's series)."""

    losses: torch.Tensor
    first_losses: torch.Tensor


def _hparams(spec: RunSpec) -> tuple:
    """What sets a run's AdamW update at every step: equal for all runs -> one torch AdamW."""
    t = spec.train
    lr = (t.lr,) if t.schedule == "constant" else (t.lr, t.schedule, t.warmup_steps, t.max_steps)
    return (*lr, t.beta1, t.beta2, t.eps, t.weight_decay)


class PackedRuns:
    """R >= 1 runs (specs + their datasets) stepped together; `step()` returns their losses.

    states: per run, None (start from the run's initial weights) or a resume state
    {"model", "optimizer"} as `export_run` writes it (every resume point), all at
    optimiser step `step` (a pack's runs always share their step count).
    ordinary: one run trained alone (`mbc.training.train.train_run`), with the ordinary
    model's arithmetic (`mbc.training.step_math.OrdinaryStep`: bitwise the ordinary
    model's step); else the stacked arithmetic of a pack, whatever its width
    (`StackedStep`). Chosen here, once: `math`.
    compile_mode: torch.compile the loss in this mode (e.g. "reduce-overhead": CUDA
    graphs) whatever train.compile says; fused=False: `PackedAdamW` even when torch's
    fused AdamW would do. Both for benchmarks/gpu_check.py, which measures them.
    """

    def __init__(
        self,
        specs: list[RunSpec],
        datasets: list[Dataset],
        device: torch.device,
        states: list[dict | None] | None = None,
        step: int = 0,
        *,
        ordinary: bool = False,
        compile_mode: str | None = None,
        fused: bool = True,
    ):
        if len(specs) != len(datasets):
            raise ValueError("one dataset per spec")
        if len({pack_key(s) for s in specs}) != 1 or pack_key(specs[0]) is None:
            raise ValueError(
                "packed runs must share the model's kind and shape, the sequence layout, the "
                "batch size, train.precision and train.compile (pack_key)"
            )
        check_train(specs[0].train)
        states = list(states) if states is not None else [None] * len(specs)
        if any((st is None) != (step == 0) for st in states):
            raise ValueError("a pack starts all its runs fresh (step 0) or all from states")
        self.specs, self.device = list(specs), device
        models = []
        for s, ds, st in zip(specs, datasets, states, strict=True):
            m = initial_model(s)
            if st is not None:
                m.load_state_dict(st["model"])
            check_bases(m, ds, s.run_id)
            models.append(m)
        if ordinary and len(specs) != 1:
            raise ValueError("the ordinary model's arithmetic is one run's")
        self.model = packed_model(models).to(device).train()
        self.model.math = OrdinaryStep(specs[0].train.clip_norm) if ordinary else StackedStep()

        self._make_optimizer(fused)
        if step > 0:
            self._load_optimizer([st["optimizer"] for st in states], step)
        self.clip = torch.tensor([s.train.clip_norm for s in specs], device=device)
        self.tokens = [ds.tokens.to(device) for ds in datasets]
        b = specs[0].train.batch_size
        self.orders = [
            BatchOrder(t.shape[0], b, s.seed, device)
            for s, t in zip(specs, self.tokens, strict=True)
        ]
        same_d = len({t.shape[0] for t in self.tokens}) == 1
        self._stacked = torch.stack(self.tokens) if same_d else None
        self.step_count = step
        self._norms: torch.Tensor | None = None  # per-run gradient norms of the last step
        self._low: list[torch.Tensor] | None = None  # the bf16 copies (`_low_copies`)
        self._graphs, self._compile_mode = compile_mode == "reduce-overhead", compile_mode
        self._loss = self._loss_function(specs[0].train, compile_mode)

    @property
    def r(self) -> int:
        return self.model.r

    @property
    def math(self) -> StepMath:
        """The pack's arithmetic (`mbc.training.step_math`), the model's own."""
        return self.model.math

    def _make_optimizer(self, fused: bool) -> None:
        specs, self._fused = self.specs, fused
        self.params = params = [self.model.p(n) for n in self.model.names]
        self.uniform = fused and len({_hparams(s) for s in specs}) == 1
        if self.uniform:
            # identical updates: torch's own (fused) AdamW over the stacked tensors
            self.opt = make_optimizer(_ParamList(params), specs[0])
        else:
            self.opt = PackedAdamW(
                params,
                lr=[s.train.lr for s in specs],
                betas=[(s.train.beta1, s.train.beta2) for s in specs],
                eps=[s.train.eps for s in specs],
                weight_decay=[s.train.weight_decay for s in specs],
            )

    def subset(self, rows: list[int]) -> PackedRuns:
        """The pack without its other runs (they finished): the kept runs' rows of weights
        and AdamW state, sliced; each run continues exactly as it would have."""
        idx = torch.as_tensor(rows, device=self.device)
        step, moments = self._moments()
        new = copy.copy(self)
        new.specs = [self.specs[r] for r in rows]
        new.model = self.model.subset(idx)
        new._make_optimizer(self._fused)
        new._set_moments(step, [(m[idx], v[idx]) for m, v in moments])
        new.clip = self.clip[idx]
        new.tokens = [self.tokens[r] for r in rows]
        new.orders = [self.orders[r] for r in rows]
        new._stacked = None if self._stacked is None else self._stacked[idx]
        if new._stacked is None and len({t.shape[0] for t in new.tokens}) == 1:
            new._stacked = torch.stack(new.tokens)
        new._norms, new._low = None, None
        new._loss = new._loss_function(new.specs[0].train, self._compile_mode)
        return new

    def _moments(self) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """(AdamW step count, [(exp_avg, exp_avg_sq)] per parameter, stacked (R, ...))."""
        if isinstance(self.opt, PackedAdamW):
            return self.opt.t, list(zip(self.opt.m, self.opt.v, strict=True))
        states = [self.opt.state.get(p) for p in self.params]
        if not all(states):
            return 0, [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]
        return int(states[0]["step"]), [(s["exp_avg"], s["exp_avg_sq"]) for s in states]

    def _set_moments(self, step: int, per_param: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if step == 0:
            return  # a fresh optimiser
        if isinstance(self.opt, PackedAdamW):
            self.opt.t = step
            for (m, v), m0, v0 in zip(per_param, self.opt.m, self.opt.v, strict=True):
                m0.copy_(m)
                v0.copy_(v)
            return
        sd = self.opt.state_dict()
        sd["state"] = {
            i: {"step": torch.tensor(float(step)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
            for i, (m, v) in enumerate(per_param)
        }
        self.opt.load_state_dict(sd)

    def _loss_function(self, train, compile_mode: str | None):
        """The packed model's per-run losses(tokens, low) under train.compile (low: the
        bf16 copies of the linear layers under train.precision bf16, else None)."""
        loss = self.model.losses
        if compile_mode is not None:
            return torch.compile(loss, mode=compile_mode)
        if train.compile and self.device.type == "cpu" and _without_cxx():
            return loss
        return torch.compile(loss) if train.compile else loss

    def _low_copies(self) -> dict[str, torch.Tensor] | None:
        """train.precision bf16: one bf16 copy of the linear layers' weights, refreshed from
        the fp32 master weights once per step (autocast would cast them at every use); the
        gradients come back into the fp32 master's .grad (`_master_grads`)."""
        if self.specs[0].train.precision != "bf16":
            return None
        names = self.model.linear_names
        masters = [self.model.p(n) for n in names]
        if self._low is None or self._low[0].shape != masters[0].shape:
            self._low = [torch.empty_like(m, dtype=torch.bfloat16) for m in masters]
        with torch.no_grad():
            torch._foreach_copy_(self._low, masters)
        for t in self._low:
            t.requires_grad_(True)
            t.grad = None
        return dict(zip(names, self._low, strict=True))

    def _master_grads(self, low: dict[str, torch.Tensor] | None) -> None:
        if low is None:
            return
        for n, t in low.items():
            self.model.p(n).grad = t.grad.float()

    def batch(self, step: int) -> torch.Tensor:
        """(R, B, T) tokens of 1-based `step`: each run's own `BatchOrder`."""
        idx = [o.indices(step) for o in self.orders]
        if self._stacked is not None:
            rows = torch.arange(self.r, device=self.device).unsqueeze(1)
            return self._stacked[rows, torch.stack(idx)]
        return torch.stack([t[i] for t, i in zip(self.tokens, idx, strict=True)])

    def step(self) -> Step:
        """One optimiser step of every run (each at its own lr, clipped to its own norm,
        in train.precision); returns the losses and first-target losses (R,)."""
        self.step_count += 1
        s = self.step_count
        low = self._low_copies()
        losses, first = self._loss(self.batch(s), low)
        self.opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        self._master_grads(low)
        self._norms = None
        if any(sp.train.clip_norm > 0 for sp in self.specs):  # (no device sync)
            # torch.nn.utils.clip_grad_norm_ per run: grads *= min(1, clip / (norm + 1e-6))
            coef = self.math.clip_coefficients(self.grad_norms(), self.clip)
            coef = torch.where(self.clip > 0, coef, 1.0).clamp(max=1.0)
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(coef.view((-1,) + (1,) * (p.dim() - 1)).to(p.grad.dtype))
        lrs = [learning_rate(sp.train, s) for sp in self.specs]
        if self.uniform:
            for group in self.opt.param_groups:
                group["lr"] = lrs[0]
        else:
            self.opt.set_lr(lrs)
        self.opt.step()
        # a CUDA graph's next replay overwrites its outputs: keep a copy
        if self._graphs:
            return Step(losses.detach().clone(), first.clone())
        return Step(losses.detach(), first)

    def grad_norms(self) -> torch.Tensor:
        """Per-run global gradient norm (R,) of the last step, before clipping (what the
        run's log records as grad_norm)."""
        if self._norms is None:
            grads = [p.grad for p in self.params if p.grad is not None]
            self._norms = self.math.grad_norms(grads)
        return self._norms

    def weights(self, r: int) -> dict[str, torch.Tensor]:
        """Run r's weights (copies) under its model's state-dict names."""
        return self.model.state_dict_of(r)

    def export_run(self, r: int) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Run r as an ordinary (model, AdamW) pair: what its resume point saves."""
        spec = self.specs[r]
        model = build_model(spec.model, spec.task, torch.Generator().manual_seed(0))
        model.load_state_dict(self.weights(r))
        model.to(self.device).train()
        opt = make_optimizer(model, spec)
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
            if self.step_count:
                for g in sd["param_groups"]:
                    g["lr"] = learning_rate(spec.train, self.step_count)
            opt.load_state_dict(sd)
        return model, opt

    def _load_optimizer(self, opt_states: list[dict], step: int) -> None:
        """Every run's AdamW state (torch's state-dict format), all at optimiser step `step`."""
        per_param = []
        for i in range(len(self.params)):
            runs = [sd["state"].get(i) for sd in opt_states]
            if any(r is None for r in runs):
                raise ValueError(f"parameter {self.model.names[i]}: no optimiser state to resume")
            if any(float(r["step"]) != step for r in runs):
                raise ValueError(f"optimiser states are not at step {step}")
            per_param.append(
                (
                    # states from resume.pt are on the CPU, exported ones on the device
                    torch.stack([r["exp_avg"].to(self.device) for r in runs]),
                    torch.stack([r["exp_avg_sq"].to(self.device) for r in runs]),
                )
            )
        self._set_moments(step, per_param)


class _ParamList(nn.Module):
    """Lets `mbc.training.setup.make_optimizer` (which takes a module) build AdamW over given tensors."""

    def __init__(self, params: list[torch.Tensor]):
        super().__init__()
        self._params = params

    def parameters(self, recurse: bool = True):
        return iter(self._params)

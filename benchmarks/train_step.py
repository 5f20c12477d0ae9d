"""Training throughput of the paper model, measured side by side in one process.

    python benchmarks/train_step.py [--quick] [--repeats 9] [--threads 1]
                                    [--device auto|cpu|cuda] [--k 5,20,36] [--packed R]
                                    [--compile] [--json PATH]

What it measures (docs/method.md#model: 4 layers, d_model 128, batch 128, 15 input
positions, 5 target positions; 807,720 parameters):

(a) ours       the training step exactly as `mbc.training.train.train_run` runs it: a pack of
               one with the ordinary model's arithmetic (`mbc.training.packed.PackedRuns.step`,
               `ordinary`) for the default `train` config
               (the model's forward: last block at the target positions only), AdamW of
               `mbc.training.setup.make_optimizer`, batches from `BatchOrder`;
    plain      the same step with every position through the last block
               (`Transformer.forward(all_positions=True)`): what the pruning buys;
(b) reference  the same architecture written the plain way (nn.MultiheadAttention, logits
               at all 15 positions, loss on the 5 target positions, torch.optim.AdamW with
               default implementation choice), started from our initial weights;
    author     the author's own model, TransformerLens' HookedTransformer (3.x), our initial
               weights copied in, logits at all positions, torch AdamW: the anchor of every
               "x/author" ratio (benchmarks/author_model.py; skipped, and said so, when
               transformer_lens is not installed: pip install -e ".[bench]");
    ours_bf16  ours with `train.precision: bf16` (one bf16 copy of the linear layers a step:
               bf16 matmuls forward and backward, fp32 weights and optimiser);
               with --compile also ours_compiled and ours_bf16_compiled;
(c) roofline   the GEMMs of ours' step (forward, input- and weight-gradients: 3x the
               forward FLOPs; the model's last layer runs queries, output projection and
               MLP at the 5 target positions only), timed alone at the step's exact shapes:
               1 / their total time is the steps/s a step made of nothing but matmuls would
               reach. roofline_full: the same for the unpruned model (plain, reference);
               roofline_bf16: ours' GEMMs in bf16 (what bf16 matmuls could reach);
(d) evaluation the in-loop evaluation `train_run` runs (`mbc.training.metrics.evaluate_shared_prefix`; without
               --quick also `mbc.training.metrics.evaluate`) on the evaluation batch `mbc.training.setup`
               builds (n_contexts x K candidates + the z-shuffle batch), as a fraction of
               the training time between two uniform evaluations:
               eval_time / (eval_every * ours_step_time), at --eval-every (500, the
               coarse grid) and at 50 steps (the author's cadence); with
               --schedule-from, also at the evaluations-per-step ratio of finished runs
               (their metrics.csv: coarse grid + log-spaced start + the 50-step
               evaluations around threshold crossings, `eval.dense_every`).
Plus a numerics check (same weights, same batches: plain, reference and author losses versus
ours over a few steps, relative tolerance 1e-4, ours_bf16 3e-2; ours' evaluation versus `mbc.training.metrics.evaluate`,
absolute 1e-5) and, with --packed R, R runs trained as one stacked model (`mbc.training.packed`)
versus R runs stepped one after the other.

--quick: 3 repeats, 2 numerics steps, the evaluation timed for ours only and its agreement
with mbc.training.metrics checked on 32 contexts (the plain evaluation of 256 x 37 sequences is what
makes the full run slow). Under a minute on a loaded 2-core machine.

Variants are timed in interleaved repeats (rotating order) and summarised by the median,
so ratios stay meaningful on a loaded machine. On CPU the default clock is this process's
CPU time (`time.process_time`): at one thread it leaves out the time spent waiting for a
core that other jobs hold, which wall time cannot; cache and memory-bandwidth contention
still leak in, so absolute rates are only as good as the machine's load at the time.
Wall times are recorded alongside.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mbc.core.artifacts import dumps_strict
from mbc.core.spec import VOCAB, ModelSpec, RunSpec, TaskSpec
from mbc.training import metrics
from mbc.training.data import STREAM_EVAL, BatchOrder, build_dataset, stream_seed
from mbc.training.metrics import fixed_contexts, make_eval_batch
from mbc.training.model import build_model, count_parameters
from mbc.training.packed import PackedRuns
from mbc.training.setup import initial_model, make_optimizer, pick_device

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import author_model  # noqa: E402  (benchmarks/author_model.py, beside this file)
import cpu_speed  # noqa: E402

PAPER_PARAMS = 807_720
BF16_TOL = 3e-2  # relative, the bf16 step's loss vs fp32's over a few steps
EVAL_TOL = 1e-5  # absolute, on every metric of evaluate (measured ~2e-8)


# ----------------------------------------------------------------------------- reference


class RefBlock(nn.Module):
    def __init__(self, d: int, h: int, d_mlp: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d_mlp), nn.GELU(), nn.Linear(d_mlp, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x)
        x = x + self.attn(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class RefTransformer(nn.Module):
    """The paper's pre-LN decoder, written the simplest way (full-sequence unembedding)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        d = spec.d_model
        self.tok_emb = nn.Embedding(VOCAB, d)
        self.pos_emb = nn.Embedding(spec.n_positions, d)
        self.blocks = nn.ModuleList(
            RefBlock(d, spec.n_heads, spec.d_mlp) for _ in range(spec.n_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (n, t) -> logits (n, t, vocab)
        t = x.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)  # True = blocked
        h = self.tok_emb(x) + self.pos_emb(torch.arange(t, device=x.device))
        for block in self.blocks:
            h = block(h, mask)
        return self.unembed(self.ln_f(h))


def target_loss(logits: torch.Tensor, seqs: torch.Tensor, n_targets: int) -> torch.Tensor:
    """From logits at every input position, the loss on the n_targets positions that predict
    the answer (how the reference, the unpruned model and the author's model are trained)."""
    return F.cross_entropy(
        logits[:, -n_targets:].reshape(-1, VOCAB), seqs[:, -n_targets:].reshape(-1)
    )


def ref_loss(model: RefTransformer, seqs: torch.Tensor, n_targets: int) -> torch.Tensor:
    return target_loss(model(seqs[:, :-1]), seqs, n_targets)


REF_NAMES = {"attn.qkv.weight": "attn.in_proj_weight", "attn.qkv.bias": "attn.in_proj_bias"}
REF_NAMES |= {f"attn.out.{w}": f"attn.out_proj.{w}" for w in ("weight", "bias")}


def to_reference(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our parameter names -> the reference's (the layouts are identical)."""
    out = {}
    for name, value in state.items():
        for ours, theirs in REF_NAMES.items():
            if name.endswith(ours):
                name = name[: -len(ours)] + theirs
        out[name] = value
    return out


# ----------------------------------------------------------------------------- FLOPs / GEMMs


def step_gemms(
    spec: ModelSpec, batch: int, t: int, n_targets: int, prune_last: bool = False
) -> list[tuple]:
    """(kind, M, K, N, count) of every matmul in one training step of our model.

    A linear layer y = x W^T with x (M, K), W (N, K) costs one forward GEMM and two in
    backward (dx = dy W, dW = dy^T x): 3x the forward FLOPs. Attention adds batched
    (t x d_head x t) matmuls over batch * heads. prune_last: the last layer as
    `mbc.training.model.Transformer` runs it (queries, output projection and MLP at the n_targets positions,
    keys and values at all t).
    """
    d, f, layers = spec.d_model, spec.d_mlp, spec.n_layers
    bh, dh = batch * spec.n_heads, spec.d_head
    out = []
    for layer in range(layers):
        tq = n_targets if prune_last and layer == layers - 1 else t
        mq, mk = batch * tq, batch * t
        if tq == t:
            out.append(("linear", mk, d, 3 * d, 1))
        else:
            out += [("linear", mq, d, d, 1), ("linear", mk, d, 2 * d, 1)]
        for k_, n_ in ((d, d), (d, f), (f, d)):
            out.append(("linear", mq, k_, n_, 1))
        out.append(("attn_qk", bh, tq, dh, t, 1))
        out.append(("attn_av", bh, tq, t, dh, 1))
    out.append(("linear", batch * n_targets, d, VOCAB, 1))  # unembedding at 5 positions
    return out


def step_flops(
    spec: ModelSpec, batch: int, t: int, n_targets: int, prune_last: bool = False
) -> float:
    total = 0.0
    for g in step_gemms(spec, batch, t, n_targets, prune_last):
        if g[0] == "linear":
            _, m, k, n, c = g
            total += 3 * 2 * m * k * n * c
        else:
            _, bh, m, k, n, c = g
            total += 3 * 2 * bh * m * k * n * c
    return total


def gemm_pass(
    spec: ModelSpec, batch: int, t: int, n_targets: int, device, prune_last: bool = False,
    dtype: torch.dtype = torch.float32,
) -> Callable:  # fmt: skip
    """A callable running the step's GEMMs once, in the layouts autograd uses, in `dtype`
    (bf16: the roofline of a step whose matmuls all run in bf16)."""
    ops = []
    for g in step_gemms(spec, batch, t, n_targets, prune_last):
        if g[0] == "linear":
            _, m, k, n, c = g
            x, w, dy = (
                torch.randn(*s, device=device, dtype=dtype) for s in ((m, k), (n, k), (m, n))
            )
            b = torch.zeros(n, device=device, dtype=dtype)
            out_y, out_dx, out_dw = (
                torch.empty(*s, device=device, dtype=dtype) for s in ((m, n), (m, k), (n, k))
            )
            for _ in range(c):
                ops.append(lambda x=x, w=w, b=b, o=out_y: torch.addmm(b, x, w.t(), out=o))
                ops.append(lambda dy=dy, w=w, o=out_dx: torch.mm(dy, w, out=o))
                ops.append(lambda dy=dy, x=x, o=out_dw: torch.mm(dy.t(), x, out=o))
        else:
            _, bh, m, k, n, c = g
            ops += c * cpu_speed.batched_matmul_ops(bh, m, k, n, device, dtype)
    return cpu_speed.in_turn(ops)


# ----------------------------------------------------------------------------- timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCK = "wall"  # "cpu": this process's CPU time (set in main)


def timed(fn: Callable, n: int, device: torch.device) -> tuple[float, float]:
    """(seconds per call on CLOCK, wall seconds per call) of fn, over n calls."""
    sync(device)
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    sync(device)
    wall, cpu = (time.perf_counter() - w0) / n, (time.process_time() - c0) / n
    return (cpu if CLOCK == "cpu" else wall), wall


def interleaved(
    fns: dict[str, Callable], n: int, repeats: int, device: torch.device, walls: dict | None = None
) -> dict[str, list[float]]:
    """Per-call seconds (CLOCK) of each fn, `repeats` times, in rotating order.

    Wall-clock seconds are appended to `walls` (same keys) when given.
    """
    names = list(fns)
    out: dict[str, list[float]] = {k: [] for k in names}
    for rep in range(repeats):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for k in order:
            t, w = timed(fns[k], n, device)
            out[k].append(t)
            if walls is not None:
                walls.setdefault(k, []).append(w)
    return out


class Trainer:
    """A textbook training loop (plain, reference, author): the model's loss, backward,
    the optimiser's step."""

    def __init__(self, model, opt, loss_fn, tokens, order):
        self.model, self.opt, self.loss_fn = model, opt, loss_fn
        self.tokens, self.order, self.step_no = tokens, order, 0
        self.losses: list[torch.Tensor] = []

    def step(self) -> None:
        self.step_no += 1
        loss = self.loss_fn(self.tokens[self.order.indices(self.step_no)])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.losses.append(loss.detach())


class Ours:
    """ours: the training step as `mbc.training.train.train_run` runs it, a pack of one
    (`mbc.training.packed.PackedRuns`) from the run's initial weights, under `train`."""

    def __init__(self, spec: RunSpec, dataset, device: torch.device, train=None):
        spec = spec if train is None else dataclasses.replace(spec, train=train)
        self.pack = PackedRuns([spec], [dataset], device, ordinary=True)
        self.model = self.pack.model
        self.losses: list[torch.Tensor] = []

    def step(self) -> None:
        self.losses.append(self.pack.step().losses[0])

    def weights(self) -> dict[str, torch.Tensor]:
        """The run's current weights under the ordinary model's names."""
        return self.pack.weights(0)


def _copy_model(spec: RunSpec, init: dict, device: torch.device) -> nn.Module:
    m = build_model(spec.model, spec.task, torch.Generator().manual_seed(0)).to(device)
    m.load_state_dict(init)
    return m.train()


def make_trainers(spec: RunSpec, ds, device: torch.device, extra: bool = True):
    """ours / plain / reference (+ ours_bf16 and, when TransformerLens is installed, author),
    all from the initial weights of `spec` (its seed) and one batch order each.

    ours is `train_run`'s step for `spec.train` (`Ours`); plain is the textbook step of
    the same model with every position through the last block (not pruned); ours_bf16
    is ours with `train.precision: bf16`; author is the author's HookedTransformer.
    """
    tokens = ds.tokens.to(device)
    init = initial_model(spec).state_dict()
    d, b = tokens.shape[0], spec.train.batch_size
    order = lambda: BatchOrder(d, b, spec.seed, device)  # noqa: E731

    plain = _copy_model(spec, init, device)
    n_t = spec.task.n_targets
    ref = RefTransformer(spec.model).to(device).train()
    ref.load_state_dict(to_reference(init))
    t = spec.train
    ref_opt = torch.optim.AdamW(  # default implementation (not fused)
        ref.parameters(), lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps, weight_decay=t.weight_decay
    )
    out = {
        "ours": Ours(spec, ds, device),
        "plain": Trainer(
            plain,
            make_optimizer(plain, spec),
            lambda s: target_loss(plain(s, all_positions=True), s, n_t),
            tokens,
            order(),
        ),
        "reference": Trainer(ref, ref_opt, lambda s: ref_loss(ref, s, n_t), tokens, order()),
    }
    if not extra:
        return out
    out["ours_bf16"] = Ours(spec, ds, device, dataclasses.replace(spec.train, precision="bf16"))
    if author_model.available():
        am = author_model.build(spec.model, init, device)
        am_opt = torch.optim.AdamW(  # what the author's training loop uses
            am.parameters(),
            lr=t.lr,
            betas=(t.beta1, t.beta2),
            eps=t.eps,
            weight_decay=t.weight_decay,
        )
        out["author"] = Trainer(
            am, am_opt, lambda s: target_loss(author_model.logits(am, s), s, n_t), tokens, order()
        )
    return out


def schedule_ratios(paths: list[str]) -> dict:
    """{K: (evaluations per training step, source)} of finished runs' metrics.csv files,
    plus "pooled" over all of them (used for a K with no run of its own)."""
    import re

    import pandas as pd

    per_k: dict = {}
    for p in paths:
        m = pd.read_csv(p)
        for run_id, g in m.groupby("run_id"):
            k = int(re.search(r"-K(\d+)-", run_id).group(1))
            rows, steps = per_k.get(k, (0, 0))
            per_k[k] = (rows + len(g), steps + int(g.step.max()))
    out = {k: (r / s, f"from the K={k} runs") for k, (r, s) in per_k.items() if s}
    if per_k:
        r, s = (sum(v[i] for v in per_k.values()) for i in (0, 1))
        out["pooled"] = (r / s, "pooled over all runs given")
    return out


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small run (see above), < 1 min")
    ap.add_argument("--steps", type=int, default=1, help="training steps per timed repeat")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (median); 9")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--k", default="5,20,36", help="K values for the evaluation cost")
    ap.add_argument("--n-contexts", type=int, default=256)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-repeats", type=int, default=1)
    ap.add_argument(
        "--schedule-from",
        nargs="*",
        default=[],
        help="metrics.csv files of finished runs: evaluations per step under their schedule",
    )
    ap.add_argument("--numerics-steps", type=int, default=None, help="default 3 (quick: 2)")
    ap.add_argument("--packed", type=int, default=0, help="also time R runs packed vs sequential")
    ap.add_argument("--compile", action="store_true", help="also time train.compile: true")
    ap.add_argument(
        "--packed-bf16",
        default=None,
        help="pack widths R of packed bf16 training to time (default 1,4,16,64; --quick 1,4;"
        " empty: skip)",
    )
    ap.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="auto: process CPU time on CPU (robust to other jobs' load at 1 thread), wall on CUDA",
    )
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 9
    if args.numerics_steps is None:
        args.numerics_steps = 2 if args.quick else 3
    if args.packed_bf16 is None:
        args.packed_bf16 = "1,4" if args.quick else "1,4,16,64"
    widths = [int(v) for v in args.packed_bf16.split(",") if v]

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    global CLOCK
    CLOCK = args.clock if args.clock != "auto" else ("cpu" if device.type == "cpu" else "wall")
    spec = RunSpec()  # the paper setting (docs/method.md#model; K = 10, 1000 groups)
    ds = build_dataset(spec.task, spec.seed)
    b, t_in, n_t = spec.train.batch_size, spec.task.seq_len - 1, spec.task.n_targets
    res: dict = {
        "env": {
            "torch": torch.__version__,
            "device": str(device),
            "threads": args.threads,
            "cpu_count": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "loadavg_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "args": vars(args),
        "ours": f"train.engine={spec.train.engine}, train.compile={spec.train.compile}",
        "author": _author_version(),
        "matrix_unit": cpu_speed.matrix_unit() if device.type == "cpu" else None,
    }

    # (a), (b): ours, plain, reference -------------------------------------------------
    tr = make_trainers(spec, ds, device)
    counts = {k: count_parameters(x.model) for k, x in tr.items()}
    n_ours = counts["ours"]
    assert set(counts.values()) == {PAPER_PARAMS}, counts
    for x in tr.values():  # warm-up (allocator, kernels, optimiser state)
        for _ in range(2):
            x.step()

    # numerics: fresh trainers, same weights, same batches ------------------------------
    num = make_trainers(spec, ds, device)
    for _ in range(args.numerics_steps + 1):
        for x in num.values():
            x.step()
    losses = {k: torch.stack(x.losses).double().cpu() for k, x in num.items()}
    numerics: dict = {}
    compared = {k: tol_of(k) for k in losses if k != "ours"}
    for k in compared:
        diff = (losses[k] - losses["ours"]).abs()
        numerics[k] = {
            "initial_loss": float(losses[k][0]),
            "initial_abs_diff": float(diff[0]),
            "max_abs_diff": float(diff.max()),
            "max_rel_diff": float((diff / losses["ours"].abs()).max()),
        }
    tol = tol_of("reference")
    numerics["ours_initial_loss"] = float(losses["ours"][0])
    numerics["ours_final_loss"] = float(losses["ours"][-1])
    numerics["steps"] = args.numerics_steps
    numerics["tolerance_rel"] = tol
    numerics["eval_tolerance_abs"] = EVAL_TOL
    del num

    # timing: interleaved
    fns: dict[str, Callable] = {k: x.step for k, x in tr.items()}
    for name, prune, dtype in (("roofline", True, torch.float32),
                               ("roofline_full", False, torch.float32),
                               ("roofline_bf16", True, torch.bfloat16)):  # fmt: skip
        fns[name] = gemm_pass(spec.model, b, t_in, n_t, device, prune_last=prune, dtype=dtype)
        fns[name]()
    if args.compile:
        for name, precision in (("ours_compiled", "fp32"), ("ours_bf16_compiled", "bf16")):
            train = dataclasses.replace(spec.train, compile=True, precision=precision)
            ct = Ours(spec, ds, device, train)
            t0 = time.perf_counter()
            ct.step()
            sync(device)
            res.setdefault("compile_s", {})[name] = time.perf_counter() - t0
            ct.step()
            fns[name] = ct.step
    # packed bf16 (train.precision bf16 under pack.enabled), eager and compiled, and its
    # GEMMs alone in bf16 as it issues them, at each width R: in the same rotation
    packs, widths_of = {}, {}
    if widths:
        pspecs = cpu_speed.paper_specs(max(widths))
        pdata = [ds] + [build_dataset(s.task, s.seed) for s in pspecs[1:]]
        for r in widths:
            variants = [(f"packed_bf16_R{r}", False)]
            if args.compile:
                variants.append((f"packed_bf16_compiled_R{r}", True))
            for name, comp in variants:
                packs[name] = cpu_speed.make_pack(r, device, comp, pdata)
                t0 = time.perf_counter()
                packs[name].step()
                sync(device)
                if comp:
                    res.setdefault("compile_s", {})[name] = time.perf_counter() - t0
                packs[name].step()
                fns[name], widths_of[name] = packs[name].step, r
            name = f"roofline_bf16_R{r}"
            fns[name] = cpu_speed.packed_gemm_pass(spec.model, r, b, t_in, n_t, device)
            fns[name]()
            widths_of[name] = r
    walls: dict[str, list[float]] = {}
    times = interleaved(fns, args.steps, args.repeats, device, walls)
    step_s = {k: med(v) for k, v in times.items()}
    res["clock"] = CLOCK
    res["step_wall_s"] = {k: med(v) for k, v in walls.items()}
    pruned_flops = step_flops(spec.model, b, t_in, n_t, prune_last=True)
    full_flops = step_flops(spec.model, b, t_in, n_t)
    flops = {k: (full_flops if k in ("plain", "reference", "author", "roofline_full")
                 else pruned_flops) * widths_of.get(k, 1) for k in step_s}  # fmt: skip
    res["parameters"] = n_ours
    res["flops_per_step"] = {"ours": pruned_flops, "full": full_flops}
    res["step_s"] = step_s
    res["step_s_all"] = times
    res["steps_per_s"] = {k: 1 / v for k, v in step_s.items()}
    res["gflops"] = {k: flops[k] / v / 1e9 for k, v in step_s.items()}
    res["ratios"] = ratios(step_s)
    res["widths"] = widths_of
    # per run-step (a pack's step advances R runs): seconds and run-steps/s per core
    run_step_s = {k: v / widths_of.get(k, 1) for k, v in step_s.items()}
    res["run_step_s"] = run_step_s
    res["run_steps_per_s_per_core"] = {
        k: 1 / (v * args.threads) for k, v in run_step_s.items() if not k.startswith("roofline")
    }
    res["best"] = best_record(res, run_step_s)
    if device.type == "cpu":  # what train.precision / compile / pack.enabled auto choose here
        from mbc.core.arithmetic import detect_cpu

        a = detect_cpu()
        res["arithmetic"] = f"{a.why()} -> {'packed' if a.pack else 'unpacked'}, " + (
            "compiled" if a.compile else "eager"
        )
    if packs:
        first = f"packed_bf16_R{widths[0]}"
        prof = {first: cpu_speed.profile_step(packs[first].step, device=device)}
        comp = f"packed_bf16_compiled_R{widths[0]}"
        if comp in packs:
            prof[comp] = cpu_speed.profile_step(packs[comp].step, device=device)
        res["profile"] = prof
        # the roofline's GEMMs against the same GEMMs timed inside the step (profiler)
        res["roofline_check"] = {
            "roofline_ms": step_s[f"roofline_bf16_R{widths[0]}"] * 1e3,
            "gemm_ms_in_step": cpu_speed.gemm_ms(packs[first].step, device=device),
        }
        res["memory"] = {
            name: cpu_speed.memory_per_run(p) for name, p in packs.items() if "compiled" not in name
        }
    # (d) evaluation cost ----------------------------------------------------------------
    ev = {}
    eval_diffs = []
    for k in [int(v) for v in args.k.split(",") if v]:
        task = TaskSpec(k=k, n_groups=spec.task.n_groups)
        eds = build_dataset(task, spec.seed)
        rng = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
        batch = make_eval_batch(eds, fixed_contexts(eds, args.n_contexts, rng), rng).to(device)
        model = _copy_model(dataclasses.replace(spec, task=task), tr["ours"].weights(), device)
        engine = metrics.ENGINES[spec.train.engine]  # what train_run evaluates with
        ours_eval = lambda bt, m=model, f=engine: f(m, bt)  # noqa: E731
        # agreement with mbc.training.metrics.evaluate (on 32 contexts with --quick)
        if args.quick:
            rng_q = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
            check = make_eval_batch(eds, fixed_contexts(eds, 32, rng_q), rng_q).to(device)
        else:
            check = batch
        a, e = metrics.evaluate(model, check), ours_eval(check)
        agree = max(abs(a[m] - e[m]) for m in a if np.isfinite(a[m]))
        eval_diffs.append(agree)
        fn = {"step": tr["ours"].step, "ours": lambda f=ours_eval, bt=batch: f(bt)}
        if not args.quick:
            fn["plain"] = lambda model=model, bt=batch: metrics.evaluate(model, bt)
        tt = interleaved(fn, 1, args.eval_repeats, device)
        st = med(tt["step"] + [step_s["ours"]])  # the step's cost around this measurement
        ev[k] = {
            "sequences": int(
                batch.candidates.shape[0]
                + (0 if batch.shuffled is None else batch.shuffled.shape[0])
            ),
            "eval_s": med(tt["ours"]),
            "step_s": st,
            "fraction": med(tt["ours"]) / (args.eval_every * st),
            "check_contexts": check.n_contexts,
            "max_abs_diff_vs_plain": agree,
        }
        if "plain" in tt:
            ev[k]["plain_eval_s"] = med(tt["plain"])
            ev[k]["plain_fraction"] = med(tt["plain"]) / (args.eval_every * st)
    sched = schedule_ratios(args.schedule_from)
    for k, v in ev.items():
        v["fraction_every_50"] = v["eval_s"] / (50 * v["step_s"])
        # under the fastest training step measured here (per run-step)
        v["fraction_every_50_best"] = v["eval_s"] / (50 * res["best"]["run_step_s"])
        ratio, source = sched.get(k, sched.get("pooled", (None, None)))
        if ratio is not None:
            v["evals_per_step"], v["schedule_source"] = ratio, source
            v["fraction_schedule"] = v["eval_s"] * ratio / v["step_s"]
            v["fraction_schedule_best"] = v["eval_s"] * ratio / res["best"]["run_step_s"]
    res["eval"] = ev
    numerics["eval_max_abs_diff"] = max(eval_diffs, default=0.0)
    numerics["ok"] = all(numerics[k]["max_rel_diff"] < t for k, t in compared.items()) and (
        numerics["eval_max_abs_diff"] < EVAL_TOL
    )
    res["numerics"] = numerics

    # packed vs sequential -----------------------------------------------------------------
    if args.packed > 0:
        r = args.packed
        specs = [RunSpec(seed=s) for s in range(r)]
        dss = [ds] + [build_dataset(s.task, s.seed) for s in specs[1:]]
        packed = PackedRuns(specs, dss, device)
        seq_ours, seq_plain = [], []
        for s, d_ in zip(specs, dss, strict=True):
            trs = make_trainers(s, d_, device, extra=False)
            seq_ours.append(trs["ours"])
            seq_plain.append(trs["plain"])
        run_all = lambda xs: [x.step() for x in xs]  # noqa: E731
        fns = {
            "packed": packed.step,
            "sequential_ours": lambda: run_all(seq_ours),
            "sequential_plain": lambda: run_all(seq_plain),
        }
        for f in fns.values():
            f()
        pt = interleaved(fns, max(1, args.steps // 2), args.repeats, device)
        ps = {k: med(v) for k, v in pt.items()}
        res["packed"] = {
            "runs": r,
            "round_s": ps,  # one step of all R runs
            "run_steps_per_s": {k: r / v for k, v in ps.items()},
            "packed_over_sequential_ours": ps["sequential_ours"] / ps["packed"],
            "packed_over_sequential_plain": ps["sequential_plain"] / ps["packed"],
        }

    res["env"]["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    res["wall_s"] = time.perf_counter() - t_start
    report(res)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(dumps_strict(res, indent=2, default=str))  # NaN (not measured): null
    return res


def best_record(res: dict, run_step_s: dict[str, float]) -> dict:
    """The fastest training variant per run-step (roofline passes aside), with its ratios
    to the author's step and to the bf16 GEMM roofline at its pack width (same run)."""
    trained = {k: v for k, v in run_step_s.items() if not k.startswith("roofline")}
    trained.pop("author", None)
    best = min(trained, key=trained.get)
    r = res["widths"].get(best, 1)
    roof = run_step_s.get(f"roofline_bf16_R{r}", run_step_s.get("roofline_bf16"))
    threads = res["env"]["threads"]
    return {
        "variant": best,
        "runs_per_pack": r,
        "run_step_s": trained[best],
        "run_steps_per_s_per_core": 1 / (trained[best] * threads),
        "vs_author": run_step_s["author"] / trained[best] if "author" in run_step_s else None,
        "vs_roofline_bf16": trained[best] / roof if roof else None,
        # the fp32 GEMM roofline of one run (unpacked): the bound for an fp32 choice
        "vs_roofline_fp32": trained[best] / run_step_s["roofline"]
        if "roofline" in run_step_s
        else None,
    }


def tol_of(variant: str) -> float:
    """Relative tolerance of a variant's losses against ours over the numerics steps:
    float32 rounding after a few AdamW steps (measured ~1e-7), bf16's own rounding for it."""
    return BF16_TOL if "bf16" in variant else 1e-4


def _author_version() -> str:
    if not author_model.available():
        why = author_model.UNAVAILABLE[0] if author_model.UNAVAILABLE else "not installed"
        return f"skipped: transformer_lens did not import ({why}; pip install -e '.[bench]')"
    import transformer_lens

    version = getattr(transformer_lens, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("transformer_lens")
    return f"TransformerLens {version} HookedTransformer, our initial weights, torch AdamW"


def ratios(step_s: dict[str, float]) -> dict[str, float]:
    """Speed ratios (> 1: the first is faster), for the variants this run timed."""
    pairs = [("ours", "reference"), ("ours", "roofline"), ("ours", "plain"),
             ("ours", "roofline_full"), ("ours_bf16", "ours"), ("ours_bf16", "roofline_bf16"),
             ("ours", "roofline_bf16"), ("ours_compiled", "ours"),
             ("ours_compiled", "reference"), ("ours_compiled", "roofline"),
             ("ours_bf16_compiled", "roofline_bf16")]  # fmt: skip
    pairs += [(v, "author") for v in ("ours", "ours_bf16", "ours_compiled", "ours_bf16_compiled")]
    out = {f"{a}/{b}": step_s[b] / step_s[a] for a, b in pairs if a in step_s and b in step_s}
    if "author" in step_s:
        ours = [k for k in step_s if k.startswith("ours")]
        best = min(ours, key=step_s.get)
        out[f"best/author ({best})"] = step_s["author"] / step_s[best]
    return out


RATIO_NOTES = {
    "ours/reference": "reference step time / ours (speed-up over the plain eager model)",
    "ours/roofline": "matmul-only time of ours' GEMMs / ours (1 = nothing but GEMMs)",
    "ours/plain": "every position through the last block / pruned (what pruning buys)",
    "ours/roofline_full": "matmul-only time of the unpruned model's GEMMs / ours",
    "ours_compiled/ours": "train.compile true / false",
    "ours/author": "the author's HookedTransformer step / ours (the benchmark's anchor)",
    "ours_bf16/author": "the author's step / ours with train.precision bf16",
    "ours_compiled/author": "the author's step / ours with train.compile true",
    "ours_bf16_compiled/author": "the author's step / ours, bf16 and compiled",
    "ours_bf16/ours": "train.precision bf16 / fp32",
    "ours_bf16/roofline_bf16": "bf16 matmul-only time of ours' GEMMs / ours with bf16",
    "ours/roofline_bf16": "bf16 matmul-only time of ours' GEMMs / ours in fp32",
    "ours_bf16_compiled/roofline_bf16": "bf16 matmul-only time / ours bf16 and compiled",
    "ours_compiled/reference": "reference / ours with train.compile true",
    "ours_compiled/roofline": "matmul-only time of ours' GEMMs / ours with train.compile true",
}


def report(res: dict) -> None:
    e, sp, st = res["env"], res["steps_per_s"], res["step_s"]
    f = res["flops_per_step"]
    print(
        f"paper model, {res['parameters']:,} params, batch 128 x 15 positions, "
        f"{f['full'] / 1e9:.2f} GFLOP/step ({f['ours'] / 1e9:.2f} as ours runs it); "
        f"torch {e['torch']}, {e['device']}, {e['threads']} thread(s), "
        f"load avg {e['loadavg_start']:.1f} -> {e['loadavg_end']:.1f}"
    )
    print(f"ours = train_run's step ({res['ours']})")
    print(f"author = {res['author']}")
    clock = "CPU ms" if res["clock"] == "cpu" else "ms"
    print(
        f"timed on the {res['clock']} clock (medians of interleaved repeats; ratios from it)"
        + ("; with >1 thread CPU time sums the threads" if res["clock"] == "cpu" else "")
    )
    print(f"{'variant':<18}{clock:>10}{'steps/s':>10}{'GFLOP/s':>10}{'wall ms':>10}")
    for k in st:
        print(
            f"{k:<18}{st[k] * 1e3:>10.1f}{sp[k]:>10.2f}{res['gflops'][k]:>10.1f}"
            f"{res['step_wall_s'][k] * 1e3:>10.1f}"
        )
    for k, v in res["ratios"].items():
        print(f"ratio {k:<20} {v:6.2f}   {RATIO_NOTES.get(k, '')}")
    for name, sec in res.get("compile_s", {}).items():
        print(f"torch.compile: {name} first step {sec:.1f} s")
    print(f"{'K':>4}{'seqs':>7}{'eval s':>9}{'fraction':>10}{'plain s':>9}{'fraction':>10}")
    for k, v in res["eval"].items():
        plain = (
            f"{v['plain_eval_s']:>9.2f}{v['plain_fraction']:>10.2%}"
            if "plain_eval_s" in v
            else f"{'-':>9}{'-':>10}"
        )
        print(f"{k:>4}{v['sequences']:>7}{v['eval_s']:>9.2f}{v['fraction']:>10.2%}{plain}")
    for k, v in res["eval"].items():
        print(f"eval fraction K={k}: {v['fraction']:.2%} (ours' evaluation / 500 steps)")
        print(
            f"eval fraction K={k} every 50 steps (the author's cadence): {v['fraction_every_50']:.2%}"
        )
        if "fraction_schedule" in v:
            print(
                f"eval fraction K={k} under eval.dense_every: {v['fraction_schedule']:.2%}"
                f" ({v['evals_per_step'] * 1000:.1f} evaluations per 1000 steps, {v['schedule_source']})"
            )
    n = res["numerics"]
    print(
        f"numerics ({n['steps']} steps, same weights and batches, tol rel {n['tolerance_rel']:g}):"
        f" ours initial loss {n['ours_initial_loss']:.6f}; "
        + "; ".join(
            f"{k} initial diff {n[k]['initial_abs_diff']:.1e}, max rel diff {n[k]['max_rel_diff']:.1e}"
            f" (tol {tol_of(k):g})"
            for k in n
            if isinstance(n[k], dict)
        )
        + f"; evaluation vs mbc.training.metrics max abs diff {n['eval_max_abs_diff']:.1e}"
        + f" (tol {n['eval_tolerance_abs']:g})"
    )
    print(f"numerics: {'OK' if n['ok'] else 'MISMATCH'}")
    if "packed" in res:
        p = res["packed"]
        print(
            f"packed R={p['runs']}: run-steps/s "
            + ", ".join(f"{k} {v:.2f}" for k, v in p["run_steps_per_s"].items())
            + f"; packed/sequential ours {p['packed_over_sequential_ours']:.2f}, "
            f"packed/sequential plain {p['packed_over_sequential_plain']:.2f}"
        )
    report_cpu(res)
    print(f"benchmark wall time {res['wall_s']:.1f} s")


def report_cpu(res: dict) -> None:
    """The packed bf16 table, the matrix unit, the profile, memory and the best record."""
    mu = res["env"].get("matrix_unit") or res.get("matrix_unit")
    if mu:
        print(
            f"CPU {mu['cpu_model']}; flags {' '.join(mu['cpu_flags']) or 'none of AMX/AVX-512'};"
            f" oneDNN bf16 matmul kernels: {', '.join(mu['onednn_kernels']) or 'not reported'}"
            f" -> AMX {'in use' if mu['amx_in_use'] else 'NOT in use'}"
            + (f". {mu['note']}" if mu["note"] else "")
        )
    per = res["run_steps_per_s_per_core"]
    rs = res["run_step_s"]
    unit = "run-steps/s/core" if res["env"]["device"] == "cpu" else "run-steps/s"
    print(f"{'variant (per run-step)':<28}{'R':>4}{'ms/run-step':>13}{unit:>18}")
    for k in rs:
        rate = f"{per[k]:>18.2f}" if k in per else f"{'(GEMMs only)':>18}"
        print(f"{k:<28}{res['widths'].get(k, 1):>4}{rs[k] * 1e3:>13.1f}{rate}")
    b = res["best"]
    print(
        f"best: {b['variant']} {b['run_steps_per_s_per_core']:.1f} {unit};"
        + (f" {b['vs_author']:.2f}x the author's step;" if b["vs_author"] else "")
        + (f" {b['vs_roofline_bf16']:.2f}x the bf16 GEMM roofline" if b["vs_roofline_bf16"] else "")
        + (f"; {b['vs_roofline_fp32']:.2f}x the fp32 one" if b.get("vs_roofline_fp32") else "")
    )
    if a := res.get("arithmetic"):
        print(f"arithmetic (auto) on this machine: {a}")
    rc = res.get("roofline_check")
    if rc:
        print(
            f"roofline check: the step's GEMMs timed alone {rc['roofline_ms']:.1f} ms,"
            f" inside the step (profiler) {rc['gemm_ms_in_step']:.1f} ms"
        )
    for name, p in res.get("profile", {}).items():
        parts = ", ".join(f"{c} {ms:.1f}" for c, ms in sorted(p["ms"].items(), key=lambda x: -x[1]))
        print(
            f"profile {name} (ms/step, {p['step_ms_under_profiler']:.1f} under the profiler): {parts}"
        )
    for name, m in res.get("memory", {}).items():
        print(
            f"memory {name}: {m['total_mib_per_run']:.0f} MiB per run ({m['state_mib_per_run']:.0f}"
            f" weights/grads/AdamW/bf16 copy + {m['activations_mib_per_run']:.0f} saved activations)"
        )
    for k, v in res["eval"].items():
        print(
            f"eval share K={k} at 50-step resolution under the best step: "
            f"{v['fraction_every_50_best']:.1%}"
            + (
                f"; under eval.dense_every (the runs' own schedule): {v['fraction_schedule_best']:.1%}"
                if "fraction_schedule_best" in v
                else ""
            )
        )


if __name__ == "__main__":
    sys.exit(0 if main()["numerics"]["ok"] else 1)

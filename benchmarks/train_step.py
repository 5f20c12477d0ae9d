"""Training throughput of the paper model, measured side by side in one process.

    python benchmarks/train_step.py [--steps 1] [--threads 1] [--device auto|cpu|cuda]
                                    [--k 5,20,36] [--packed R] [--compile] [--json PATH]

What it measures (spec sections 2 and 7: 4 layers, d_model 128, batch 128, 15 input
positions, 5 target positions; 807,720 parameters):

(a) ours       the training step exactly as `mbc.train.train_run` runs it: the model of
               `mbc.model.build_model`, `mbc.metrics.training_loss`, the optimiser of
               `mbc.train.make_optimizer`, batches from `BatchOrder`;
    engine     the same step with `mbc.engine.training_loss` (proposed drop-in);
(b) reference  the same architecture written the plain way (nn.MultiheadAttention, logits
               at all 15 positions, loss on the 5 target positions, torch.optim.AdamW with
               default implementation choice), started from our initial weights;
(c) roofline   the GEMMs one training step performs (forward, input- and weight-gradients:
               3x the forward FLOPs), timed alone at the step's exact shapes; 1 / their
               total time is the steps/s a step made of nothing but matmuls would reach;
(d) evaluation `mbc.metrics.evaluate` (and `mbc.engine.evaluate`) on the evaluation batch
               `mbc.train` builds (n_contexts x K candidates + the z-shuffle batch), as a
               fraction of the training time between two uniform evaluations:
               eval_time / (eval_every * step_time).
Plus a numerics check (same weights, same batches: reference and engine losses versus
ours) and, with --packed R, R runs trained as one stacked model (`mbc.packed`) versus R
runs stepped one after the other.

Variants are timed in interleaved repeats (rotating order) and summarised by the median,
so ratios stay meaningful on a loaded machine. On CPU the default clock is this process's
CPU time (`time.process_time`): at one thread it leaves out the time spent waiting for a
core that other jobs hold, which wall time cannot; cache and memory-bandwidth contention
still leak in, so absolute rates are only as good as the machine's load at the time.
Wall times are recorded alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mbc import engine
from mbc.data import STREAM_EVAL, STREAM_INIT, build_dataset, stream_seed
from mbc.metrics import evaluate, fixed_contexts, make_eval_batch, training_loss
from mbc.model import build_model, count_parameters
from mbc.spec import VOCAB, ModelSpec, RunSpec, TaskSpec
from mbc.train import BatchOrder, make_optimizer, pick_device

PAPER_PARAMS = 807_720


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


def ref_loss(model: RefTransformer, seqs: torch.Tensor, n_targets: int) -> torch.Tensor:
    logits = model(seqs[:, :-1])  # every position is unembedded ...
    # ... and the loss reads the n_targets positions that predict the answer
    return F.cross_entropy(
        logits[:, -n_targets:].reshape(-1, VOCAB), seqs[:, -n_targets:].reshape(-1)
    )


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


def step_gemms(spec: ModelSpec, batch: int, t: int, n_targets: int) -> list[tuple]:
    """(kind, M, K, N, count) of every matmul in one training step of our model.

    A linear layer y = x W^T with x (M, K), W (N, K) costs one forward GEMM and two in
    backward (dx = dy W, dW = dy^T x): 3x the forward FLOPs. Attention adds batched
    (t x d_head x t) matmuls over batch * heads.
    """
    m, d, f, layers = batch * t, spec.d_model, spec.d_mlp, spec.n_layers
    out = []
    for k_, n_ in ((d, 3 * d), (d, d), (d, f), (f, d)):
        out.append(("linear", m, k_, n_, layers))
    out.append(("linear", batch * n_targets, d, VOCAB, 1))  # unembedding at 5 positions
    bh, dh = batch * spec.n_heads, spec.d_head
    out.append(("attn_qk", bh, t, dh, t, layers))
    out.append(("attn_av", bh, t, t, dh, layers))
    return out


def step_flops(spec: ModelSpec, batch: int, t: int, n_targets: int) -> float:
    total = 0.0
    for g in step_gemms(spec, batch, t, n_targets):
        if g[0] == "linear":
            _, m, k, n, c = g
            total += 3 * 2 * m * k * n * c
        else:
            _, bh, m, k, n, c = g
            total += 3 * 2 * bh * m * k * n * c
    return total


def gemm_pass(spec: ModelSpec, batch: int, t: int, n_targets: int, device) -> Callable:
    """A callable running the step's GEMMs once, in the layouts autograd uses."""
    ops = []
    for g in step_gemms(spec, batch, t, n_targets):
        if g[0] == "linear":
            _, m, k, n, c = g
            x, w, dy = (torch.randn(*s, device=device) for s in ((m, k), (n, k), (m, n)))
            b = torch.zeros(n, device=device)
            out_y, out_dx, out_dw = (
                torch.empty(*s, device=device) for s in ((m, n), (m, k), (n, k))
            )
            for _ in range(c):
                ops.append(lambda x=x, w=w, b=b, o=out_y: torch.addmm(b, x, w.t(), out=o))
                ops.append(lambda dy=dy, w=w, o=out_dx: torch.mm(dy, w, out=o))
                ops.append(lambda dy=dy, x=x, o=out_dw: torch.mm(dy.t(), x, out=o))
        else:
            _, bh, m, k, n, c = g
            a, bm, dy = (
                torch.randn(*s, device=device) for s in ((bh, m, k), (bh, k, n), (bh, m, n))
            )
            for _ in range(c):
                ops.append(lambda a=a, bm=bm: torch.bmm(a, bm))
                ops.append(lambda dy=dy, bm=bm: torch.bmm(dy, bm.transpose(1, 2)))
                ops.append(lambda dy=dy, a=a: torch.bmm(a.transpose(1, 2), dy))

    def run():
        for op in ops:
            op()

    return run


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
    """One run's training state, stepping as `mbc.train.train_run` does."""

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


def make_trainers(spec: RunSpec, tokens: torch.Tensor, device: torch.device, seed: int = 0):
    """ours / engine / reference, all from our initial weights and one batch order each."""
    gen = torch.Generator().manual_seed(stream_seed(seed, STREAM_INIT))
    ours = build_model(spec.model, spec.task, gen).to(device).train()
    init = {k: v.detach().clone() for k, v in ours.state_dict().items()}
    d, b = tokens.shape[0], spec.train.batch_size
    order = lambda: BatchOrder(d, b, seed, device)  # noqa: E731

    eng = build_model(spec.model, spec.task, torch.Generator().manual_seed(0)).to(device)
    eng.load_state_dict(init)
    eng.train()

    ref = RefTransformer(spec.model).to(device).train()
    ref.load_state_dict(to_reference(init))
    t = spec.train
    ref_opt = torch.optim.AdamW(  # default implementation (not fused)
        ref.parameters(), lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps, weight_decay=t.weight_decay
    )
    n_t = spec.task.n_targets
    return {
        "ours": Trainer(
            ours,
            make_optimizer(ours, spec, device),
            lambda s: training_loss(ours, s),
            tokens,
            order(),
        ),
        "engine": Trainer(
            eng,
            make_optimizer(eng, spec, device),
            lambda s: engine.training_loss(eng, s),
            tokens,
            order(),
        ),
        "reference": Trainer(ref, ref_opt, lambda s: ref_loss(ref, s, n_t), tokens, order()),
    }


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=1, help="training steps per timed repeat")
    ap.add_argument("--repeats", type=int, default=9, help="interleaved repeats (median)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--k", default="5,20,36", help="K values for the evaluation cost")
    ap.add_argument("--n-contexts", type=int, default=256)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-repeats", type=int, default=1)
    ap.add_argument("--numerics-steps", type=int, default=3)
    ap.add_argument("--packed", type=int, default=0, help="also time R runs packed vs sequential")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(engine loss)")
    ap.add_argument(
        "--clock",
        default="auto",
        choices=["auto", "cpu", "wall"],
        help="auto: process CPU time on CPU (robust to other jobs' load at 1 thread), wall on CUDA",
    )
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    global CLOCK
    CLOCK = args.clock if args.clock != "auto" else ("cpu" if device.type == "cpu" else "wall")
    spec = RunSpec()  # the paper setting of spec section 2 (K = 10, 1000 groups)
    ds = build_dataset(spec.task, spec.seed)
    tokens = ds.tokens.to(device)
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
    }

    # (a), (b): ours, engine, reference -------------------------------------------------
    tr = make_trainers(spec, tokens, device)
    n_ours, n_ref = count_parameters(tr["ours"].model), count_parameters(tr["reference"].model)
    assert n_ours == n_ref == PAPER_PARAMS, (n_ours, n_ref)
    for x in tr.values():  # warm-up (allocator, kernels, optimiser state)
        for _ in range(2):
            x.step()

    # numerics: fresh trainers, same weights, same batches ------------------------------
    num = make_trainers(spec, tokens, device)
    for _ in range(args.numerics_steps + 1):
        for x in num.values():
            x.step()
    losses = {k: torch.stack(x.losses).double().cpu() for k, x in num.items()}
    numerics = {}
    for k in ("reference", "engine"):
        diff = (losses[k] - losses["ours"]).abs()
        numerics[k] = {
            "initial_loss": float(losses[k][0]),
            "initial_abs_diff": float(diff[0]),
            "max_abs_diff": float(diff.max()),
            "max_rel_diff": float((diff / losses["ours"].abs()).max()),
        }
    tol = 1e-4  # relative, float32 after a few AdamW steps (measured ~1e-7)
    numerics["ours_initial_loss"] = float(losses["ours"][0])
    numerics["ours_final_loss"] = float(losses["ours"][-1])
    numerics["steps"] = args.numerics_steps
    numerics["tolerance_rel"] = tol
    numerics["ok"] = all(numerics[k]["max_rel_diff"] < tol for k in ("reference", "engine"))
    del num

    # timing: interleaved
    fns: dict[str, Callable] = {k: x.step for k, x in tr.items()}
    gemm = gemm_pass(spec.model, b, t_in, n_t, device)
    gemm()
    fns["roofline_gemms"] = gemm
    if args.compile:
        cm = build_model(spec.model, spec.task, torch.Generator().manual_seed(0)).to(device).train()
        cm.load_state_dict(tr["ours"].model.state_dict())
        closs = engine.compiled_training_loss(cm)
        ct = Trainer(
            cm,
            make_optimizer(cm, spec, device),
            closs,
            tokens,
            BatchOrder(tokens.shape[0], b, 0, device),
        )
        t0 = time.perf_counter()
        ct.step()
        sync(device)
        res["compile_s"] = time.perf_counter() - t0
        ct.step()
        fns["engine_compiled"] = ct.step
    walls: dict[str, list[float]] = {}
    times = interleaved(fns, args.steps, args.repeats, device, walls)
    step_s = {k: med(v) for k, v in times.items()}
    res["clock"] = CLOCK
    res["step_wall_s"] = {k: med(v) for k, v in walls.items()}
    flops = step_flops(spec.model, b, t_in, n_t)
    res["parameters"] = n_ours
    res["flops_per_step"] = flops
    res["step_s"] = step_s
    res["step_s_all"] = times
    res["steps_per_s"] = {k: 1 / v for k, v in step_s.items()}
    res["gflops"] = {k: flops / v / 1e9 for k, v in step_s.items()}
    res["ratios"] = {
        "ours_over_reference": step_s["reference"] / step_s["ours"],  # speed ratio
        "ours_over_roofline": step_s["roofline_gemms"] / step_s["ours"],
        "engine_over_ours": step_s["ours"] / step_s["engine"],
        "engine_over_roofline": step_s["roofline_gemms"] / step_s["engine"],
    }
    if "engine_compiled" in step_s:
        res["ratios"]["compiled_over_ours"] = step_s["ours"] / step_s["engine_compiled"]
    res["numerics"] = numerics

    # (d) evaluation cost ----------------------------------------------------------------
    ev = {}
    for k in [int(v) for v in args.k.split(",") if v]:
        task = TaskSpec(k=k, n_groups=spec.task.n_groups)
        eds = build_dataset(task, spec.seed)
        rng = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
        batch = make_eval_batch(eds, fixed_contexts(eds, args.n_contexts, rng), rng).to(device)
        model = build_model(spec.model, task, torch.Generator().manual_seed(0)).to(device)
        model.load_state_dict(tr["ours"].model.state_dict())
        model.train()
        a = evaluate(model, batch)
        e = engine.evaluate(model, batch)
        agree = max(abs(a[m] - e[m]) for m in a if np.isfinite(a[m]))
        fn = {
            "ours": lambda model=model, batch=batch: evaluate(model, batch),
            "engine": lambda model=model, batch=batch: engine.evaluate(model, batch),
            "step": tr["ours"].step,
        }
        tt = interleaved(
            {"step": fn["step"], "ours": fn["ours"], "engine": fn["engine"]},
            1,
            args.eval_repeats,
            device,
        )
        st = med(tt["step"] + [step_s["ours"]])  # the step's cost around this measurement
        ev[k] = {
            "sequences": int(
                batch.candidates.shape[0]
                + (0 if batch.shuffled is None else batch.shuffled.shape[0])
            ),
            "eval_s": med(tt["ours"]),
            "engine_eval_s": med(tt["engine"]),
            "step_s": st,
            "fraction": med(tt["ours"]) / (args.eval_every * st),
            "engine_fraction": med(tt["engine"]) / (args.eval_every * st),
            "engine_max_abs_diff": agree,
        }
    res["eval"] = ev

    # packed vs sequential -----------------------------------------------------------------
    if args.packed > 0:
        from mbc.packed import PackedRuns

        r = args.packed
        specs = [RunSpec(seed=s) for s in range(r)]
        dss = [ds] + [build_dataset(s.task, s.seed) for s in specs[1:]]
        packed = PackedRuns(specs, dss, device)
        seq = []
        seq_engine = []
        for s, d_ in zip(specs, dss, strict=True):
            trs = make_trainers(s, d_.tokens.to(device), device, seed=s.seed)
            seq.append(trs["ours"])
            seq_engine.append(trs["engine"])
        run_all = lambda xs: [x.step() for x in xs]  # noqa: E731
        fns = {
            "packed": packed.step,
            "sequential_ours": lambda: run_all(seq),
            "sequential_engine": lambda: run_all(seq_engine),
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
            "packed_over_sequential_engine": ps["sequential_engine"] / ps["packed"],
        }

    res["env"]["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    res["wall_s"] = time.perf_counter() - t_start
    report(res)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2, default=str)
    return res


def report(res: dict) -> None:
    e, sp, st = res["env"], res["steps_per_s"], res["step_s"]
    print(
        f"paper model, {res['parameters']:,} params, batch 128 x 15 positions, "
        f"{res['flops_per_step'] / 1e9:.2f} GFLOP/step; torch {e['torch']}, {e['device']}, "
        f"{e['threads']} thread(s), load avg {e['loadavg_start']:.1f} -> {e['loadavg_end']:.1f}"
    )
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
    print("ratios (speed):", ", ".join(f"{k} {v:.2f}" for k, v in res["ratios"].items()))
    if "compile_s" in res:
        print(f"torch.compile: first step {res['compile_s']:.1f} s")
    n = res["numerics"]
    print(
        f"numerics ({n['steps']} steps, same weights and batches, tol rel {n['tolerance_rel']:g}):"
        f" ours initial loss {n['ours_initial_loss']:.6f}; "
        + "; ".join(
            f"{k} initial diff {n[k]['initial_abs_diff']:.1e}, max rel diff {n[k]['max_rel_diff']:.1e}"
            for k in ("reference", "engine")
        )
        + f" -> {'OK' if n['ok'] else 'MISMATCH'}"
    )
    print(f"{'K':>4}{'seqs':>7}{'eval s':>9}{'frac':>8}{'engine s':>10}{'frac':>8}{'diff':>9}")
    for k, v in res["eval"].items():
        print(
            f"{k:>4}{v['sequences']:>7}{v['eval_s']:>9.2f}{v['fraction']:>8.2%}"
            f"{v['engine_eval_s']:>10.2f}{v['engine_fraction']:>8.2%}{v['engine_max_abs_diff']:>9.1e}"
        )
    if "packed" in res:
        p = res["packed"]
        print(
            f"packed R={p['runs']}: run-steps/s "
            + ", ".join(f"{k} {v:.2f}" for k, v in p["run_steps_per_s"].items())
            + f"; packed/sequential ours {p['packed_over_sequential_ours']:.2f}, "
            f"packed/sequential engine {p['packed_over_sequential_engine']:.2f}"
        )
    print(f"benchmark wall time {res['wall_s']:.1f} s")


if __name__ == "__main__":
    main()

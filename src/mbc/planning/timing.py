"""Every timing of a training step on this machine (`measure_steps_per_s`: one run, or a
pack of R; the banner and `mbc.estimate` call it), and how long a preset takes trained in
packs (`pack.enabled`, one device): measured rates in, expected wall time out. Used by
`python -m mbc.estimate --device cuda` and by benchmarks/gpu_check.sh, which measures the
rates and saves them (`--rates FILE`).

The rates (`measure_rates`), at one reference shape (a run of the preset's most common
shape): seconds per pack step for packs of R runs (R = 1, 8, 32, 128 by default; every
run its own seed and data, `mbc.training.packed.PackedRuns.step`), and seconds per
in-loop evaluation of one run (`mbc.training.metrics.evaluate_shared_prefix`) at two
K, the evaluation's cost growing with K (K candidates per context), alone and per run
when 32 runs evaluate together (`PackedTransformer.evaluate`, `train_pack`'s on CUDA).

The model of a pack's time (`pack_segments`): its runs start together and leave as they
finish, so with expected steps s_1 <= ... <= s_R it takes
    sum_j (s_j - s_(j-1)) * step_s(R - j + 1)  +  sum_runs n_evals(run) * eval_s(K)
with eval_s the batched one on CUDA, step_s(R) interpolated linearly in R between the
measured widths (beyond the widest: its time per run) and scaled by a step's work (weights
x tokens) relative to the reference shape: exact there, a rough guide for other shapes.
The linear baseline's packs (E13) take their own measured pack steps (`linear_pack`,
measured when `measure_rates` is given a linear run) or, where the rates have none, the
reference shape's pack step of their width, unscaled: an upper bound (a linear step is two
matmuls and an AdamW update, a fraction of the transformer's kernels and FLOPs).

Packs side by side (`concurrent_schedule`: the workflow's train_pack jobs under
`--resources gpu_mem_mb=...`): each stretch of a pack at width R keeps the device busy
for the fraction u(R) = (R x work / step_s(R)) / peak of its throughput, peak the best
measured run-steps/s of the reference shape times its work (a step's weights x tokens; for
the linear baseline its two dense matmuls x batch); evaluation counts as u = 1 (a
conservative bound). Packs start in the workflow's order
(`mbc.core.packing.pack_priority`: most budgeted work first) while a job slot and their
estimated memory (`pack_memory_gb`) are free; while the running packs' fractions sum past
1 each advances at 1 / sum of its own speed (the device shared in proportion). A modelled schedule, not a measured one: it assumes the small packs'
kernels fill the gaps the big one leaves (launch-bound steps leave the device idle).
Expected steps and evaluation counts are the cost model's (`mbc.planning.cost`) (tau from
tau.csv, run logs or the D^1.2 law).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from mbc.core.artifacts import dumps_strict, write_text_atomic
from mbc.core.packing import make_packs, pack_key, pack_priority
from mbc.core.spec import VOCAB, RunSpec
from mbc.planning.cost import pack_memory_gb
from mbc.training.data import build_dataset
from mbc.training.metrics import evaluate_shared_prefix
from mbc.training.packed import PackedRuns
from mbc.training.setup import eval_batch, initial_model

WIDTHS = (1, 8, 32, 128)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pack_of(spec: RunSpec, width: int, device: torch.device, **variant):
    """(a pack of `width` runs of `spec`'s shape, seeds 0..width-1, their shared dataset:
    the data do not change the work; the identity linear baseline reads its own seed's B
    strings, so each of its runs gets its own), and the first run's dataset."""
    specs = [dataclasses.replace(spec, seed=s) for s in range(width)]
    if spec.model.label == "linear_identity":
        datasets = [build_dataset(s.task, s.seed) for s in specs]
    else:
        datasets = [build_dataset(spec.task, spec.seed)] * width
    return PackedRuns(specs, datasets, device, **variant), datasets[0]


def time_pack_step(
    spec: RunSpec, width: int, device: torch.device, steps: int = 20, **variant
) -> dict:
    """Seconds per step of a pack of `width` runs of `spec`'s shape (`_pack_of`), and its
    peak device memory.
    variant: `PackedRuns`' ordinary / compile_mode / fused."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    pack, _ = _pack_of(spec, width, device, **variant)
    for _ in range(3):  # warm-up (allocator, kernels, a compile)
        pack.step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        pack.step()
    _sync(device)
    out = {"step_s": (time.perf_counter() - t0) / steps}
    if device.type == "cuda":
        out["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def measure_steps_per_s(
    spec: RunSpec, device: torch.device, steps: int = 20, width: int = 0
) -> float:
    """Run-steps/s of `spec`'s training step (`mbc.training.packed.PackedRuns.step`, what
    `mbc.training.train.train_pack` runs): width 0, one run alone (as `train_run` trains
    it: the ordinary model's arithmetic); width R >= 1, a pack of R runs of its shape:
    R / its step time."""
    if width == 0:
        return 1 / time_pack_step(spec, 1, device, steps=steps, ordinary=True)["step_s"]
    return width / time_pack_step(spec, width, device, steps=steps)["step_s"]


def time_evaluation(spec: RunSpec, device: torch.device, repeats: int = 3) -> float:
    """Seconds per in-loop evaluation of one run of `spec` (its fixed evaluation batch)."""
    model = initial_model(spec).to(device).train()
    batch = eval_batch(spec, build_dataset(spec.task, spec.seed), device)
    evaluate_shared_prefix(model, batch)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        evaluate_shared_prefix(model, batch)
    _sync(device)
    return (time.perf_counter() - t0) / repeats


def time_batched_evaluation(
    spec: RunSpec, width: int, device: torch.device, repeats: int = 3
) -> float:
    """Seconds per run when `width` runs of `spec` evaluate together
    (`PackedTransformer.evaluate`, what `train_pack` does on CUDA)."""
    pack, ds = _pack_of(spec, width, device)
    batches = [eval_batch(s, ds, device) for s in pack.specs]
    runs = list(range(width))
    pack.model.evaluate(runs, batches)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        pack.model.evaluate(runs, batches)
    _sync(device)
    return (time.perf_counter() - t0) / repeats / width


def with_k(spec: RunSpec, k: int) -> RunSpec:
    """`spec` at K = k, D unchanged."""
    d = spec.task.d
    return dataclasses.replace(spec, task=dataclasses.replace(spec.task, k=k, n_groups=d // k))


def measure_rates(
    spec: RunSpec,
    device: torch.device,
    widths=WIDTHS,
    eval_ks=(5, 36),
    steps: int = 20,
    eval_width: int = 32,
    say=print,
    linear: RunSpec | None = None,
) -> dict:
    """The rates `pack_seconds` needs, at `spec`'s shape; with `linear` (a linear-baseline
    run), its packs' steps too (`linear_pack`)."""
    rates = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "device_mem_gb": (
            torch.cuda.get_device_properties(device).total_memory / 2**30
            if device.type == "cuda"
            else None
        ),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "shape": shape_of(spec),
        "pack": {},
        "eval_s": {},
    }
    for w in widths:
        r = time_pack_step(spec, w, device, steps)
        rates["pack"][str(w)] = r
        mem = f", peak memory {r['peak_mem_gb']:.2f} GiB" if "peak_mem_gb" in r else ""
        say(
            f"pack of {w:>3}: {1 / r['step_s']:8.1f} pack steps/s = "
            f"{w / r['step_s']:9.1f} run-steps/s{mem}"
        )
    # one run alone (mbc.training.train.train_run): the ordinary model's arithmetic
    rates["single_step_s"] = 1 / measure_steps_per_s(spec, device, steps)
    say(f"one run alone: {1 / rates['single_step_s']:.1f} steps/s")
    if linear is not None:
        rates["linear_pack"] = {}
        for w in widths:
            r = rates["linear_pack"][str(w)] = time_pack_step(linear, w, device, steps)
            say(f"linear baseline, pack of {w:>3}: {w / r['step_s']:9.1f} run-steps/s")
    rates["eval_batched_s"], rates["eval_batched_width"] = {}, eval_width
    for k in eval_ks:
        rates["eval_s"][str(k)] = time_evaluation(with_k(spec, k), device)
        b = rates["eval_batched_s"][str(k)] = time_batched_evaluation(
            with_k(spec, k), eval_width, device
        )
        say(
            f"one evaluation at K = {k}: {rates['eval_s'][str(k)] * 1e3:.1f} ms alone, "
            f"{b * 1e3:.1f} ms per run with {eval_width} runs evaluated together"
        )
    return rates


def shape_of(spec: RunSpec) -> dict:
    m = spec.model
    return {
        "model": [m.n_layers, m.n_heads, m.d_model, m.d_mlp],
        "batch_size": spec.train.batch_size,
        "seq_len": spec.task.seq_len,
        "precision": spec.train.precision,
    }


def save_rates(rates: dict, path) -> None:
    write_text_atomic(Path(path), dumps_strict(rates, indent=1) + "\n")


def step_seconds(rates: dict, width: int, spec: RunSpec) -> float:
    """Seconds per pack step of `width` runs of `spec`'s shape (a linear baseline's: its own
    measured, else the reference shape's, module docstring)."""
    if spec.model.kind == "linear":
        return _ref_step_seconds(rates, width, rates.get("linear_pack") or rates["pack"])
    return _ref_step_seconds(rates, width) * _work(shape_of(spec)) / _work(rates["shape"])


def _ref_step_seconds(rates: dict, width: int, table: dict | None = None) -> float:
    table = rates["pack"] if table is None else table
    ws = sorted(int(w) for w in table)
    ts = [table[str(w)]["step_s"] for w in ws]
    # beyond the widest pack measured: its time per run
    return float(np.interp(width, ws, ts)) if width <= ws[-1] else ts[-1] * width / ws[-1]


def utilization(rates: dict, width: int, spec: RunSpec | None = None) -> float:
    """The fraction of the device's throughput a pack of `width` runs of `spec`'s shape (None:
    the reference shape) keeps busy: its work per second over the best measured, the
    reference's run-steps/s times its step's work (module docstring)."""
    peak = max(int(w) / v["step_s"] for w, v in rates["pack"].items())
    if spec is None:
        return min(1.0, width / _ref_step_seconds(rates, width) / peak)
    work = _step_work(spec) / _work(rates["shape"])
    return min(1.0, width * work / step_seconds(rates, width, spec) / peak)


def _step_work(spec: RunSpec) -> float:
    """`_work` of `spec`'s step; the linear baseline's: its two dense matmuls (the one-hot
    input times W1, the hidden times W2) x batch, one position a sequence."""
    m, t = spec.model, spec.task
    if m.kind != "linear":
        return _work(shape_of(spec))
    n_in, n_out = m.linear_n_in(t), t.n_targets * VOCAB
    return (n_in + n_out) * m.linear_hidden * spec.train.batch_size


def _work(shape: dict) -> float:
    """A step's work (`shape_of`) up to a constant: weights of the blocks and embeddings x
    tokens."""
    n_layers, _, d, d_mlp = shape["model"]
    tokens = shape["batch_size"] * shape["seq_len"]
    return (n_layers * (4 * d * d + 2 * d * d_mlp) + 2 * VOCAB * d) * tokens


def eval_seconds(rates: dict, k: int, batched: bool = False) -> float:
    """Seconds per evaluation of one run at K = k: alone, or evaluated together with the
    pack's other runs (what `train_pack` does on CUDA), linear in K between the two measured."""
    table = rates["eval_batched_s"] if batched and rates.get("eval_batched_s") else rates["eval_s"]
    ks = sorted(int(x) for x in table)
    return float(np.interp(k, ks, [table[str(x)] for x in ks]))


def pack_segments(
    specs: list[RunSpec], steps: list[int], evals: list[float], rates: dict, batched: bool = False
) -> list[tuple[float, float]]:
    """One pack's expected time as stretches (seconds alone, device fraction `utilization`):
    one per width it passes through as its runs leave, then its evaluations (u = 1)."""
    order = sorted(range(len(specs)), key=lambda i: steps[i])
    out, done = [], 0
    for j, i in enumerate(order):
        width = len(order) - j
        if steps[i] > done:
            secs = (steps[i] - done) * step_seconds(rates, width, specs[i])
            out.append((secs, utilization(rates, width, specs[i])))
        done = steps[i]
    ev = sum(n * eval_seconds(rates, s.task.k, batched) for s, n in zip(specs, evals, strict=True))
    return out + [(ev, 1.0)]


def pack_seconds(
    specs: list[RunSpec], steps: list[int], evals: list[float], rates: dict, batched: bool = False
) -> float:
    """Expected seconds of one pack alone on the device (module docstring)."""
    return sum(secs for secs, _ in pack_segments(specs, steps, evals, rates, batched))


@dataclasses.dataclass(frozen=True)
class Placed:
    """One pack in `concurrent_schedule`: its id, runs, seconds alone, memory, start, end."""

    pack_id: str
    runs: int
    alone_s: float
    memory_gb: float
    start_s: float
    end_s: float


def concurrent_schedule(
    packs: list[tuple[str, int, list[tuple[float, float]], float, int]],
    slots: int,
    memory_gb: float | None,
) -> list[Placed]:
    """Packs (id, runs, `pack_segments`, memory GB, priority) side by side on one device
    (module docstring): at most `slots` at once and their memory within `memory_gb` (None:
    not checked); each waiting pack, highest priority first, starts once both allow it. A
    pack bigger than `memory_gb` alone still runs (alone)."""
    slots = max(1, slots)
    waiting = sorted(packs, key=lambda p: -p[4])
    running: dict[str, list] = {}  # id -> [remaining stretches, start, the pack's tuple]
    placed: list[Placed] = []
    now = 0.0

    def fits(p) -> bool:
        if len(running) >= slots:
            return False
        used = sum(r[2][3] for r in running.values())
        return memory_gb is None or not running or used + p[3] <= memory_gb

    while waiting or running:
        for p in list(waiting):
            if fits(p):
                waiting.remove(p)
                running[p[0]] = [[list(s) for s in p[2] if s[0] > 0], now, p]
        load = sum(r[0][0][1] for r in running.values() if r[0])
        speed = 1.0 if load <= 1 else 1.0 / load
        # the next event: a stretch ends (each advances at `speed` of its alone pace)
        dt = min((r[0][0][0] / speed for r in running.values() if r[0]), default=0.0)
        now += dt
        for pid, r in list(running.items()):
            if r[0]:
                r[0][0][0] -= dt * speed
                if r[0][0][0] <= 1e-9:
                    r[0].pop(0)
            if not r[0]:
                p = r[2]
                alone = sum(s for s, _ in p[2])
                placed.append(Placed(p[0], p[1], alone, p[3], r[1], now))
                del running[pid]
    return placed


def packed_wall_seconds(
    specs: dict[str, RunSpec],
    steps: dict[str, int],
    evals: dict[str, float],
    rates: dict,
    max_runs: int,
    batched: bool = False,
    slots: int = 1,
    memory_gb: float | None = None,
) -> dict:
    """{"packs": [(pack id, runs, seconds alone)], "alone_s", "wall_s", "serial_s",
    "device_s", "schedule": [`Placed`]} for one device: `device_s` the packs' work at the
    device's best throughput (no arrangement of them is faster in this model); `wall_s` with
    up to `slots` packs side by side (`concurrent_schedule`), `serial_s` one after another;
    batched: the packs evaluate their runs together (`train_pack` on CUDA). alone_s: runs
    that cannot be packed, one by one after the packs."""
    packs = make_packs(specs, max_runs)
    rows, sched_in, device_s = [], [], 0.0
    for pid, members in packs.items():
        s = [specs[r] for r in members]
        segs = pack_segments(
            s, [steps[r] for r in members], [evals[r] for r in members], rates, batched
        )
        rows.append((pid, len(members), sum(x for x, _ in segs)))
        device_s += sum(x * u for x, u in segs)
        sched_in.append((pid, len(members), segs, pack_memory_gb(s), pack_priority(s)))
    alone = [r for r in specs if pack_key(specs[r]) is None]
    alone_s = sum(
        steps[r] * step_seconds(rates, 1, specs[r])
        + evals[r] * eval_seconds(rates, specs[r].task.k)
        for r in alone
    )
    schedule = concurrent_schedule(sched_in, slots, memory_gb)
    together = max((p.end_s for p in schedule), default=0.0)
    return {
        "packs": rows,
        "alone_s": alone_s,
        "serial_s": sum(x[2] for x in rows) + alone_s,
        "wall_s": together + alone_s,
        "device_s": device_s,
        "schedule": schedule,
    }

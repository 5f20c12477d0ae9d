"""The CPU side of benchmarks/train_step.py: which matmul kernels run, packed bf16 training
(`mbc.training.packed.PackedRuns` with train.precision bf16) at several pack widths, its
bf16 GEMM roofline issued exactly as the packed step issues them, checked against a direct
timing of the same GEMMs inside the step, a profile of the step by op category, and the
memory a run holds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from mbc.core.provenance import cpu_model
from mbc.core.spec import VOCAB, ModelSpec, RunSpec
from mbc.machine.probe import cpu_flags, probe
from mbc.training.data import build_dataset
from mbc.training.packed import PackedRuns

# ----------------------------------------------------------------------------- the machine


def matrix_unit() -> dict:
    """What the CPU offers for bf16 matmuls and what oneDNN actually runs.

    cpu_flags: the AMX / AVX-512 bf16 flags of /proc/cpuinfo (what `lscpu` shows);
    onednn_kernels: the implementation names oneDNN's verbose mode prints for one bf16
    matmul of this process's torch (e.g. `brg_matmul:avx512_core_amx`): AMX runs only if
    a name says `amx`. Both are facts of this machine, read at run time, by the probe that
    `train.precision: auto` decides with (`mbc.core.arithmetic`).
    """
    flags = cpu_flags()
    seen = probe()
    kernels = seen.get("kernels", [])
    wanted = ("amx_bf16", "amx_tile", "amx_int8", "avx512_bf16", "avx512f")
    amx = "amx_bf16" in flags
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": [f for f in wanted if f in flags],
        "amx_bf16": amx,
        "onednn_kernels": kernels,
        "onednn_isa": seen.get("isa"),
        "amx_in_use": any("amx" in k for k in kernels),
        "note": (
            ""
            if amx
            else "this CPU has no AMX: bf16 matmuls run on AVX-512/AVX2; the ratio to the"
            " bf16 roofline measured here is what must hold"
        ),
    }


# ----------------------------------------------------------------------------- packs


def paper_specs(r: int, precision: str = "bf16", compile_: bool = False) -> list[RunSpec]:
    """R runs of the paper setting (K = 10, 1000 groups), seeds 0..R-1."""
    base = RunSpec()
    train = dataclasses.replace(base.train, precision=precision, compile=compile_)
    return [dataclasses.replace(base, seed=s, train=train) for s in range(r)]


def make_pack(r: int, device, compile_: bool = False, datasets=None) -> PackedRuns:
    specs = paper_specs(r, compile_=compile_)
    datasets = datasets or [build_dataset(s.task, s.seed) for s in specs]
    return PackedRuns(specs, datasets[:r], device)


def packed_gemms(spec: ModelSpec, r: int, batch: int, t: int, n_targets: int) -> list[tuple]:
    """(kind, R, M, K, N) of every matmul of one packed step (`mbc.training.forward.forward`,
    pruned last block), in the layouts the packed step issues: forward `baddbmm(b, x, W^T)`, input
    gradient `bmm(dy, W)`, weight gradient `bmm(dy^T, x)`; attention's batched matmuls over
    R * batch * heads."""
    d, f, layers = spec.d_model, spec.d_mlp, spec.n_layers
    bh, dh = r * batch * spec.n_heads, spec.d_head
    out = []
    for layer in range(layers):
        tq = n_targets if layer == layers - 1 else t
        mq, mk = batch * tq, batch * t
        if tq == t:
            out.append(("linear", r, mk, d, 3 * d))
        else:
            out += [("linear", r, mq, d, d), ("linear", r, mk, d, 2 * d)]
        out += [("linear", r, mq, k_, n_) for k_, n_ in ((d, d), (d, f), (f, d))]
        out += [("attn_qk", bh, t, dh, tq), ("attn_av", bh, tq, t, dh)]
    out.append(("linear", r, batch * n_targets, d, VOCAB))
    return out


def packed_gemm_pass(spec: ModelSpec, r: int, batch: int, t: int, n_targets: int, device):
    """A callable running the packed step's GEMMs once in bf16, as the step issues them."""
    bf = torch.bfloat16
    ops: list[Callable] = []
    for kind, rr, m, k, n in packed_gemms(spec, r, batch, t, n_targets):
        if kind == "linear":
            x, w, dy = (
                torch.randn(rr, *s, device=device, dtype=bf) for s in ((m, k), (n, k), (m, n))
            )
            b = torch.zeros(rr, 1, n, device=device, dtype=bf)
            ops.append(lambda x=x, w=w, b=b: torch.baddbmm(b, x, w.transpose(1, 2)))
            ops.append(lambda dy=dy, w=w: torch.bmm(dy, w))
            ops.append(lambda dy=dy, x=x: torch.bmm(dy.transpose(1, 2), x))
        else:  # attention: scores laid out keys-first (mbc.training.forward.attend)
            ops += batched_matmul_ops(rr, m, k, n, device, bf)
    return in_turn(ops)


def batched_matmul_ops(b: int, m: int, k: int, n: int, device, dtype) -> list[Callable]:
    """A batched matmul (b, m, k) @ (b, k, n) and its two gradients, as autograd runs them."""
    a, bm, dy = (torch.randn(b, *s, device=device, dtype=dtype) for s in ((m, k), (k, n), (m, n)))
    return [
        lambda: torch.bmm(a, bm),
        lambda: torch.bmm(dy, bm.transpose(1, 2)),
        lambda: torch.bmm(a.transpose(1, 2), dy),
    ]


def in_turn(ops: list[Callable]) -> Callable[[], None]:
    """One callable running `ops` one after another."""

    def run():
        for op in ops:
            op()

    return run


# ----------------------------------------------------------------------------- profile

GEMM_OPS = {"aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm", "aten::matmul"}
CAST_OPS = {"aten::copy_", "aten::_to_copy", "aten::_foreach_copy_"}
ATTENTION_OPS = {"aten::_softmax", "aten::_softmax_backward_data", "aten::masked_fill_",
                 "aten::masked_fill", "aten::_scaled_dot_product_flash_attention_for_cpu"}  # fmt: skip
OPTIMISER = ("adam", "Optimizer", "_foreach", "clamp", "linalg_vector_norm")


def category(name: str, shapes) -> str:
    """Op category of a profiled aten op (the step's shapes tell attention's bmm apart)."""
    if name.startswith("## Call CompiledFxGraph") or name.startswith("Torch-Compiled"):
        return "compiled (fused) kernels"
    if any(o in name for o in OPTIMISER) and "copy" not in name:
        return "optimiser"
    if name in GEMM_OPS:
        # attention's batched matmuls have rows of sequence positions (<= 32), linear
        # layers' have batch x positions rows (>= 640 here)
        first = shapes[0] if shapes and shapes[0] else []
        return "attention" if len(first) == 3 and first[1] <= 32 else "GEMM"
    if name in CAST_OPS:
        return "casts / copies"
    if name in ATTENTION_OPS:
        return "attention"
    return "elementwise / norm"


def _profiled(step: Callable[[], object], n: int, device, shapes: bool = False):
    """(profiler, ms per step) over n steps: CPU time of this process on a CPU; on CUDA,
    wall time to the last kernel's end, with the kernels' device time recorded."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    clock = time.perf_counter if cuda else time.process_time
    step()
    if cuda:
        torch.cuda.synchronize()
    t0 = clock()
    with profile(activities=acts, record_shapes=shapes) as prof:
        for _ in range(n):
            step()
        if cuda:
            torch.cuda.synchronize()
    return prof, (clock() - t0) / n * 1e3


def _self_ms(e, device) -> float:
    """An op's own time in microseconds: on the device's kernels on CUDA, on the CPU otherwise."""
    cuda = torch.device(device).type == "cuda"
    return e.self_device_time_total if cuda else e.self_cpu_time_total


def profile_step(step: Callable[[], object], n: int = 3, device="cpu") -> dict:
    """ms per step by op category (the aten ops' self time that torch's profiler sees: CPU
    time on a CPU, kernel time on CUDA), and the rest of the step's time as Python /
    autograd / framework overhead (on CUDA: time the GPU waits for the host)."""
    prof, total = _profiled(step, n, device, shapes=True)
    cats: dict[str, float] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if not (e.key.startswith("aten::") or "Compiled" in e.key or "Optimizer" in e.key):
            continue
        if "Optimizer.step" in e.key:
            continue  # its aten ops are counted themselves
        c = category(e.key, e.input_shapes)
        cats[c] = cats.get(c, 0.0) + _self_ms(e, device) / 1e3 / n
    cats["Python / autograd / other"] = max(0.0, total - sum(cats.values()))
    return {"step_ms_under_profiler": total, "ms": cats}


# ----------------------------------------------------------------------------- memory


def memory_per_run(pack: PackedRuns) -> dict:
    """Bytes a run holds in a pack: fp32 weights, gradients and AdamW moments, its bf16
    copy, and the activations autograd saves in one step (measured with saved-tensor hooks
    over unique storages), divided by the pack's width."""
    seen: dict[int, int] = {}

    def pack_hook(t):
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack_hook, lambda t: t):
        pack.step()
    params = sum(p.numel() * p.element_size() for p in pack.params)
    low = sum(t.numel() * t.element_size() for t in (getattr(pack, "_low", None) or []))
    state = 4 * params + low  # weights, grads, two moments
    saved = sum(seen.values())
    return {
        "runs": pack.r,
        "state_mib_per_run": state / pack.r / 2**20,
        "activations_mib_per_run": saved / pack.r / 2**20,
        "total_mib_per_run": (state + saved) / pack.r / 2**20,
    }


def gemm_ms(step: Callable[[], object], n: int = 3, device="cpu") -> float:
    """ms per step spent in matmul kernels (bmm, baddbmm, mm, addmm), profiled in the step."""
    prof, _ = _profiled(step, n, device)
    return sum(_self_ms(e, device) for e in prof.key_averages() if e.key in GEMM_OPS) / 1e3 / n

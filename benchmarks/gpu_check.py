"""The prepared device check (README "Training on a GPU"): run by benchmarks/gpu_check.sh.

    bash benchmarks/gpu_check.sh [--small] [--device auto|cpu|cuda] [--out DIR]
                                 [--slice-budget-s 150]

Prints, in one run:
1. the device (name, memory, torch and CUDA versions; CPU threads);
2. training throughput at the preset's E1 K = 10 shape: one run as `train_run` steps it,
   and packs of 1, 8, 32 and 128 runs (`mbc.training.packed.PackedRuns`), in pack
   steps/s and run-steps/s, with the peak device memory; the in-loop evaluation of one
   run at K = 5 and 36. Saved to DIR/rates.json;
3. a slice of the paper trained packed (`mbc.training.packed_train.train_pack`): E1 at
   K = 5 and 10, seeds 0-2, every run with the preset's own settings (budget, evaluation
   schedule, early stop), stopped at --slice-budget-s if not finished (said so). Its tau
   table: per run tau, steps, final L_cand / log K, finished or not. Run files in
   DIR/runs/<run_id>/, exactly as the workflow writes them;
4. the preset's expected wall time on this device, packed (`mbc.estimate --device ...
   --rates DIR/rates.json`), with the slice's taus in the law tau = c D^1.2.

Default on a GPU: the paper preset (under 8 minutes on one H200 is the target: the
throughput part is about a minute; the slice stops at --slice-budget-s). --small (the
default without CUDA): the smoke preset's model and sizes (E1 at K = 3 and 5), so the
same code runs on a CPU in a minute; CI runs it (tests/test_benchmark.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from mbc import estimate, pack_estimate
from mbc.core import config as mbc_config
from mbc.core.runlog import finished, logged_tau, read_log
from mbc.training.data import build_dataset
from mbc.training.packed_train import train_pack
from mbc.training.train import pick_device

REPO = Path(__file__).resolve().parents[1]


T0 = time.perf_counter()


def section(title: str) -> None:
    print(f"\n== {title}   [{time.perf_counter() - T0:.0f} s]", flush=True)


def device_lines(device: torch.device) -> None:
    print(f"python {platform.python_version()}, torch {torch.__version__}, device {device}")
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        print(
            f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, compute capability "
            f"{p.major}.{p.minor}, {p.multi_processor_count} SMs; CUDA {torch.version.cuda}"
        )
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.get_num_threads()} torch threads")  # fmt: skip


def load_preset(preset: str) -> mbc_config.Config:
    raw = mbc_config.read_yaml(REPO / "config.yaml")
    return mbc_config.load(raw, {"preset": preset, "seeds": [0, 1, 2]})


def slice_table(specs, run_dirs) -> list[dict]:
    rows = []
    for s, d in zip(specs, run_dirs, strict=True):
        log = read_log(Path(d) / "state" / "log.jsonl")
        evals = [r for r in log if "event" not in r]
        last = evals[-1] if evals else {}
        rows.append(
            {
                "k": s.task.k,
                "d": s.task.d,
                "seed": s.seed,
                "tau": logged_tau(log),
                "steps": last.get("step", 0),
                "lcand": last.get("candidate_loss", math.nan) / s.task.log_k,
                "finished": finished(log),
            }
        )
    return rows


def speed_options(ref, device: torch.device, small: bool, steps: int, compile_too: bool) -> None:
    """Pack step time under each option against the default (fp32, eager, fused AdamW):
    unfused AdamW (`PackedAdamW`), bf16 autocast, and on CUDA torch.compile in its
    default mode and in "reduce-overhead" (CUDA graphs), fp32 and bf16. Compiling on a
    CPU takes minutes, so --small leaves it out."""
    bf16 = dataclasses.replace(ref, train=dataclasses.replace(ref.train, precision="bf16"))
    options = [
        ("fp32 eager, fused AdamW (default)", ref, {}),
        ("fp32 eager, unfused PackedAdamW", ref, {"fused": False}),
        ("bf16 autocast, eager", bf16, {}),
    ]
    if compile_too and device.type == "cuda":
        options += [
            ("fp32 compiled (default mode)", ref, {"compile_mode": "default"}),
            (
                "fp32 compiled, reduce-overhead (CUDA graphs)",
                ref,
                {"compile_mode": "reduce-overhead"},
            ),
            (
                "bf16 compiled, reduce-overhead (CUDA graphs)",
                bf16,
                {"compile_mode": "reduce-overhead"},
            ),
        ]
    elif device.type == "cuda":
        print("(compiled variants skipped: --no-compile)")
    else:
        print(
            "(compiled variants: CUDA only here; on a CPU see benchmarks/train_step.py --compile)"
        )
    width = 32 if small else 128
    base = None
    for name, spec, variant in options:
        t0 = time.perf_counter()
        r = pack_estimate.time_pack_step(spec, width, device, steps, **variant)
        base = base or r["step_s"]
        print(
            f"  pack of {width}, {name:<46} {width / r['step_s']:9.1f} run-steps/s, "
            f"{base / r['step_s']:5.2f}x ({time.perf_counter() - t0:.0f} s incl. warm-up)"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true", help="smoke sizes (default without CUDA)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=None, help="where rates.json and the slice's runs go")
    ap.add_argument("--slice-budget-s", type=float, default=150.0)
    ap.add_argument("--steps", type=int, default=None, help="timed steps per rate")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled variants")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    try:
        device = pick_device(a.device)
    except RuntimeError as exc:  # --device cuda without CUDA
        raise SystemExit(f"gpu_check: {exc}") from None
    small = a.small or device.type != "cuda"
    preset = "smoke" if small else "paper"
    ks = (3, 5) if small else (5, 10)
    out = Path(a.out or tempfile.mkdtemp(prefix="gpu_check-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1 if device.type == "cpu" else torch.get_num_threads())

    section("1. device")
    device_lines(device)
    print(f"preset {preset} ({'small sizes' if small else 'paper sizes'}); output in {out}")

    cfg = load_preset(preset)
    e1 = {r: cfg.specs[r] for r in cfg.run_ids("E1")}
    ref = next(s for s in e1.values() if s.task.k == max(ks))

    section(f"2. throughput at the E1 K = {ref.task.k} shape ({pack_estimate.shape_of(ref)})")
    steps = a.steps or (5 if small else 20)
    rates = pack_estimate.measure_rates(ref, device, steps=steps)
    one = 1 / rates["single_step_s"]
    for w, r in rates["pack"].items():
        print(
            f"  pack of {w:>3} vs one unpacked run: {int(w) / r['step_s'] / one:6.1f}x the run-steps/s"
        )
    pack_estimate.save_rates(rates, out / "rates.json")
    print(f"saved {out / 'rates.json'}")

    section("2b. speed options, measured side by side (relative to the workflow's default)")
    speed_options(ref, device, small, steps, compile_too=not a.no_compile)

    section(f"3. E1 at K = {ks[0]} and {ks[1]}, 3 seeds, trained as one pack")
    chosen = [s for s in e1.values() if s.task.k in ks]
    datasets = [build_dataset(s.task, s.seed) for s in chosen]
    dirs = [out / "runs" / s.run_id for s in chosen]
    t0 = time.perf_counter()
    train_pack(
        chosen, datasets, dirs, device, say=lambda m: None,
        deadline=time.monotonic() + a.slice_budget_s,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    rows = slice_table(chosen, dirs)
    print(f"{len(chosen)} runs in {wall:.1f} s (budget {a.slice_budget_s:.0f} s)")
    print(f"{'K':>3} {'D':>7} {'seed':>4} {'tau':>7} {'steps':>7} {'L_cand/logK':>12}  finished")
    for r in rows:
        tau = "-" if r["tau"] is None else str(r["tau"])
        print(
            f"{r['k']:>3} {r['d']:>7} {r['seed']:>4} {tau:>7} {r['steps']:>7} "
            f"{r['lcand']:>12.4f}  {'yes' if r['finished'] else 'no (budget)'}"
        )
    run_steps = sum(r["steps"] for r in rows)
    print(f"{run_steps:,} run-steps, {run_steps / wall:,.0f} run-steps/s with evaluations")

    section(f"4. the {preset} preset's expected wall time on this device, packed")
    estimate.estimate(
        preset,
        str(REPO / "config.yaml"),
        outdir=str(out),
        device=str(device),
        rates_path=str(out / "rates.json"),
        calibrate_s=60.0,
    )
    print(f"\ngpu_check done in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

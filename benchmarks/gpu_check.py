"""The prepared device check (README "Training on a GPU"): run by benchmarks/gpu_check.sh.

    bash benchmarks/gpu_check.sh [--small] [--device auto|cpu|cuda] [--out DIR]
                                 [--slice-budget-s 150]

Prints, in one run:
1. the device (name, memory, torch and CUDA versions; CPU threads);
2. training throughput at the preset's E1 K = 10 shape: one run as `train_run` steps it,
   and packs of 1, 8, 32 and 128 runs (`mbc.training.packed.PackedRuns`), in pack
   steps/s and run-steps/s, with the peak device memory; the in-loop evaluation of one
   run at K = 5 and 36. Saved to DIR/rates.json;
3. a slice of the paper trained packed (`mbc.training.train.train_pack`): E1 at
   K = 5 and 10 and (paper sizes only) E6's learning-rate grid at K = 20, whose lr 5e-3
   diverged in the author's runs; seeds 0-2, every run with the preset's own settings
   (budget, evaluation schedule, early stop, divergence stop), stopped at
   --slice-budget-s if not finished (said so). Its table: per run tau, steps, final
   L_cand / log K, finished, diverged (at which step) or stopped by the budget. Run files
   in DIR/runs/<run_id>/, exactly as the workflow writes them;
2c. (CUDA) benchmarks/train_step.py on this device: the author's model, ours fp32 and bf16,
   eager and compiled, packed bf16 at R = 1 and 256, the bf16 GEMM roofline, a profile by op
   category (kernel time), side by side in one run; DIR/train_step.json (--no-train-step
   skips it);
2b. (after the slice) the pack step under each speed option against the workflow's
   default: unfused AdamW, bf16, and on CUDA torch.compile (default mode and CUDA graphs);
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
import traceback
from pathlib import Path

import torch

from mbc import config as mbc_config
from mbc import estimate
from mbc.core.journal import finished, logged_divergence, logged_tau, read_journal
from mbc.core.layout import RunPaths
from mbc.planning import timing
from mbc.training.data import build_dataset
from mbc.training.setup import pick_device
from mbc.training.train import train_pack

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


def slice_table(specs, run_dirs, experiments) -> list[dict]:
    rows = []
    for s, d, exp in zip(specs, run_dirs, experiments, strict=True):
        log = read_journal(RunPaths(d).log)
        evals = [r for r in log if "event" not in r]
        last = evals[-1] if evals else {}
        rows.append(
            {
                "experiment": exp,
                "lr": s.train.lr,
                "diverged": logged_divergence(log),
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


def guarded(failed: list, name: str, fn, *args, **kwargs) -> None:
    """Run one section; a failure prints its traceback and the check goes on (a device
    lease is one call: one broken section must not cost the others' numbers)."""
    try:
        fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        failed.append(name)


def train_step_on_device(out: Path, no_compile: bool) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_step

    argv = ["--device", "cuda", "--packed-bf16", "1,256", "--json", str(out / "train_step.json")]
    train_step.main(argv + ([] if no_compile else ["--compile"]))


def paper_slice(cfg, e1: dict, ks: tuple, small: bool, device, out: Path, budget_s: float):
    """E1 at K = ks and (paper sizes) E6's lr grid, trained packed within budget_s: does
    lr 5e-3 diverge here as in the author's runs?"""
    named = [("E1", s) for s in e1.values() if s.task.k in ks]
    e1_ids = {s.run_id for _, s in named}
    e6 = {} if small else {r: cfg.specs[r] for r in cfg.run_ids("E6") if r not in e1_ids}
    named += [("E6", s) for s in e6.values()]
    exps, chosen = [e for e, _ in named], [s for _, s in named]
    section(
        f"3. E1 at K = {ks[0]} and {ks[1]}"
        + (f", E6 (lr grid at K = 20, {len(e6)} runs)" if e6 else "")
        + ", 3 seeds, trained packed"
    )
    datasets = [build_dataset(s.task, s.seed) for s in chosen]
    dirs = [out / "runs" / s.run_id for s in chosen]
    t0 = time.perf_counter()
    train_pack(
        chosen, datasets, dirs, device, say=lambda m: None,
        deadline=time.monotonic() + budget_s,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    rows = slice_table(chosen, dirs, exps)
    print(f"{len(chosen)} runs in {wall:.1f} s (budget {budget_s:.0f} s)")
    print(
        f"{'exp':>4} {'K':>3} {'D':>7} {'lr':>8} {'seed':>4} {'tau':>7} {'steps':>7} "
        f"{'L_cand/logK':>12}  state"
    )
    for r in rows:
        tau = "-" if r["tau"] is None else str(r["tau"])
        state = (
            f"diverged at step {r['diverged']}"
            if r["diverged"] is not None
            else ("finished" if r["finished"] else "stopped (slice budget)")
        )
        print(
            f"{r['experiment']:>4} {r['k']:>3} {r['d']:>7} {r['lr']:>8.1e} {r['seed']:>4} "
            f"{tau:>7} {r['steps']:>7} {r['lcand']:>12.4f}  {state}"
        )
    run_steps = sum(r["steps"] for r in rows)
    print(f"{run_steps:,} run-steps, {run_steps / wall:,.0f} run-steps/s with evaluations")


def speed_options(ref, device: torch.device, small: bool, steps: int, compile_too: bool) -> None:
    """Pack step time under each option against the default (fp32, eager, fused AdamW):
    unfused AdamW (`PackedAdamW`), bf16 (one bf16 weight copy a step), and on CUDA torch.compile in its
    default mode and in "reduce-overhead" (CUDA graphs), fp32 and bf16. Compiling on a
    CPU takes minutes, so --small leaves it out."""
    bf16 = dataclasses.replace(ref, train=dataclasses.replace(ref.train, precision="bf16"))
    options = [
        ("fp32 eager, fused AdamW (default)", ref, {}),
        ("fp32 eager, unfused PackedAdamW", ref, {"fused": False}),
        ("bf16 (one bf16 copy of the linear layers a step), eager", bf16, {}),
    ]
    if compile_too and device.type == "cuda":
        options += [
            ("fp32 compiled (default mode)", ref, {"compile_mode": "default"}),
            (
                "fp32 compiled, reduce-overhead (CUDA graphs)",
                ref,
                {"compile_mode": "reduce-overhead"},
            ),
            ("bf16 compiled (default mode)", bf16, {"compile_mode": "default"}),
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
        r = timing.time_pack_step(spec, width, device, steps, **variant)
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
    ap.add_argument("--no-train-step", action="store_true", help="skip benchmarks/train_step.py")
    ap.add_argument(
        "--calibrate-s",
        type=float,
        default=60.0,
        help="mbc.estimate's calibration run (a tau) when the slice measured none",
    )
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

    section(f"2. throughput at the E1 K = {ref.task.k} shape ({timing.shape_of(ref)})")
    steps = a.steps or (5 if small else 20)
    # E13's linear baseline packs too: its own pack steps (`linear_pack`)
    linear = next((s for s in cfg.specs.values() if s.model.kind == "linear"), None)
    rates = timing.measure_rates(ref, device, steps=steps, linear=linear)
    one = 1 / rates["single_step_s"]
    for w, r in rates["pack"].items():  # against train_run's step of one run alone
        print(
            f"  pack of {w:>3} vs one run alone: {int(w) / r['step_s'] / one:6.1f}x the run-steps/s"
        )
    timing.save_rates(rates, out / "rates.json")
    print(f"saved {out / 'rates.json'}")

    failed = []
    if device.type == "cuda" and not a.no_train_step:
        section("2c. benchmarks/train_step.py on this device (the CPU benchmark's variants)")
        guarded(failed, "2c", train_step_on_device, out, a.no_compile)
    guarded(failed, "3", paper_slice, cfg, e1, ks, small, device, out, a.slice_budget_s)
    # after the slice: on a GPU its compiles take the longest, and the rest matters more
    section("2b. speed options, measured side by side (relative to the workflow's default)")
    guarded(failed, "2b", speed_options, ref, device, small, steps, not a.no_compile)

    section(f"4. the {preset} preset's expected wall time on this device, packed")
    guarded(
        failed, "4", estimate.estimate, preset, str(REPO / "config.yaml"), outdir=str(out),
        device=str(device), rates_path=str(out / "rates.json"), calibrate_s=a.calibrate_s,
    )  # fmt: skip
    if failed:
        print(f"\nFAILED sections: {', '.join(failed)} (tracebacks above)")
    print(f"\ngpu_check done in {time.perf_counter() - t_start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""How long will a preset take here?  `python -m mbc.estimate --preset smoke|quick|paper`

Prints the number of distinct runs, the step budget (sum of max_steps), the expected
number of steps and the expected wall time on this machine. The assumptions, kept simple:

* Expected steps of a run. A run stops early once it has run `early_stop_tau_factor` x tau
  steps (3 by default) and converged, else at max_steps. tau comes from, in order:
  1. a measured tau: the outdir's tau.csv (its `steps` column: steps actually run), or a
     `tau` event in the live log of a run in progress;
  2. a power law tau = c * D^1.2 (the paper's tau ~ D^1.2, independent of K), with c
     the median of tau / D^1.2 over the measured taus, or else calibrated by one short
     measured run: the preset's smallest-D transformer run, trained (with the training
     step, `mbc.training.packed.PackedRuns`, and its evaluation) until its first crossing,
     at most --calibrate-s seconds. A run that does not cross in time gives only a lower bound
     on c (said so). lr, batch size, sharing and label noise are ignored by the law.
  Linear-baseline runs (E13) are assumed never to transition: their full budget. A run
  whose early stop waits for the first-target crossing, or reads the training log's
  first-target series (E12, label noise or not: memorising the corrupted labels meets its
  bound), counts from FIRST_TARGET_RATIO x tau (`mbc.planning.cost`); label noise under a
  stop that reads the clean-label L_cand never meets it: the full budget.
* Steps/s: 20 timed steps (after 3 warm-up steps) of each distinct (model, batch size,
  sequence layout, train.engine, train.compile, train.precision) shape, with the config's
  `threads` and device, through the training step (`mbc.planning.timing.measure_steps_per_s`); or
  --steps-per-s X for every run. Evaluation adds (n_contexts * (K + 1)) sequences
  forward per evaluation point, counted as one third of a training step per `batch_size`
  sequences (benchmarks/train_step.py: the engine's shared-prefix evaluation costs about
  half that at K = 36, the plain one about twice; evaluation is a few % of the steps).
* Wall time with J parallel jobs (default: cores / threads) is max(total / J, longest run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import torch

from mbc import config as mbc_config
from mbc.core.artifacts import write_text_atomic
from mbc.core.crossing import first_crossing
from mbc.core.layout import Layout
from mbc.core.packing import pack_widths
from mbc.core.spec import RunSpec
from mbc.core.units import duration
from mbc.planning.banner import cached_rate, calibration_cache, read_calibrations
from mbc.planning.cost import (
    D_EXPONENT,
    expected,
    measured_taus,
    n_evaluations,
    run_seconds,
    shape_key,
    tau_law,
    wall_seconds,
)
from mbc.planning.timing import measure_rates, packed_wall_seconds, shape_of
from mbc.training.data import build_dataset
from mbc.training.metrics import ENGINES
from mbc.training.packed import PackedRuns
from mbc.training.schedule import eval_schedule
from mbc.training.setup import eval_batch, initial_model, pick_device

# packs side by side by default: README's `snakemake --cores 8`, one core per train_pack job
PACK_JOBS = 8


def calibrate_tau(spec: RunSpec, device: torch.device, budget_s: float) -> tuple[int, bool]:
    """(tau, crossed) of one run trained until L_cand < threshold log K (or out of time).
    Eager even where the run compiles: a cold compile took most of a 60 s budget (35 steps,
    no crossing, a lower bound that put paper_cpu at 2h44m of training, 23h04m once it crossed),
    and tau is a step count, the same either way."""
    dataset = build_dataset(spec.task, spec.seed)
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, compile=False))
    run = PackedRuns([spec], [dataset], device, ordinary=True)  # train_run's step
    model, batch = initial_model(spec).to(device), eval_batch(spec, dataset, device)
    evals = set(eval_schedule(spec.eval, spec.train.max_steps)[0])
    limit = spec.eval.threshold * spec.task.log_k
    t0, step = time.perf_counter(), 0
    while step < spec.train.max_steps:
        step += 1
        run.step()
        if step in evals:
            model.load_state_dict(run.weights(0))
            loss = ENGINES[spec.train.engine](model, batch)["candidate_loss"]
            if first_crossing([step], [loss], limit) is not None:
                return step, True
            if time.perf_counter() - t0 > budget_s:
                break
    return step, False


def cached_calibration(spec, device, calibrate_s: float) -> tuple[int, bool]:
    """`calibrate_tau`, cached per run id, device and time cap (its tau is a step count: the
    same wherever it trained, but a cap can cut it short) in `calibration_cache`, which the
    banner reads too."""
    # "eager": entries from before the calibration ran eager are not reused (a cold compile
    # could leave them short of their crossing)
    key = f"{spec.run_id}|{device}|{calibrate_s:g}|eager"
    known = read_calibrations()
    if key in known:
        return known[key]
    tau, crossed = calibrate_tau(spec, device, calibrate_s)
    entries = {k: list(v) for k, v in {**known, key: (tau, crossed)}.items()}
    with contextlib.suppress(OSError):  # a read-only cache costs a calibration next time
        write_text_atomic(calibration_cache(), json.dumps(entries, indent=1))
    return tau, crossed


def estimate(
    preset: str,
    config_path: str = "config.yaml",
    outdir: str | None = None,
    steps_per_s: float | None = None,
    tau_coef: float | None = None,
    calibrate_s: float = 60.0,
    jobs: int | None = None,
    say=print,
    device: str | None = None,
    rates_path: str | None = None,
    pack_jobs: int | None = None,
    gpu_mem_gb: float | None = None,
) -> dict:
    """device: overrides the config's; with `cuda` (or a rates file) the preset is
    estimated trained in packs on one device (`mbc.planning.timing`), from the rates in
    `rates_path` (benchmarks/gpu_check.sh writes them) or measured here, at most
    `pack_jobs` packs side by side (default `PACK_JOBS`) within `gpu_mem_gb` of device
    memory (default: the rates file's; none: memory not checked)."""
    raw = mbc_config.read_yaml(config_path)
    overrides = {"preset": preset} | ({"outdir": outdir} if outdir else {})
    cfg = mbc_config.load(raw, overrides)
    specs = cfg.specs
    wanted = device or str(cfg.raw.get("device", "auto"))
    # with rates measured elsewhere (a GPU's, by gpu_check.sh), any machine estimates for it
    device = torch.device(wanted) if rates_path and wanted != "auto" else pick_device(wanted)
    packed = device.type == "cuda" or rates_path is not None
    threads = int(cfg.raw.get("threads", 1))
    torch.set_num_threads(threads)
    jobs = jobs or max(1, (os.cpu_count() or 1) // threads)

    measured = measured_taus(cfg.outdir, specs)
    # the power law's coefficient: given, or from the measured taus, or one calibration run
    law_coef, n_law = tau_law(specs, measured)
    coef_note, lower_bound = "", False
    if tau_coef is None and law_coef is not None:
        tau_coef, coef_note = law_coef, f"median over {n_law} measured taus"
    elif tau_coef is None and len(measured) < len(specs):
        transformers = [s for s in specs.values() if s.model.kind == "transformer"]
        if transformers:
            cal = min(transformers, key=lambda s: (s.task.d, s.train.max_steps))
            t0 = time.perf_counter()
            # the law's coefficient is in steps, whatever trains them: estimating for a GPU
            # from its rates file on a machine without one calibrates here, on the CPU
            here = device
            if device.type == "cuda" and not torch.cuda.is_available():
                here = torch.device("cpu")
            say(
                f"calibrating tau on {here}: training {cal.run_id} to its first crossing "
                f"(at most {calibrate_s:.0f} s)"
            )
            tau, crossed = cached_calibration(cal, here, calibrate_s)
            tau_coef, lower_bound = tau / cal.task.d**D_EXPONENT, not crossed
            coef_note = (
                f"calibration run {cal.run_id} (D={cal.task.d}, on {here}): "
                + (f"tau={tau}" if crossed else f"no crossing in {tau} steps: LOWER BOUND")
                + f", {time.perf_counter() - t0:.0f} s"
            )
    elif tau_coef is not None:
        coef_note = "given on the command line"

    # run-steps/s per shape and pack width (pack.enabled on a CPU: each pack is one job,
    # its runs stepping together at the width's rate)
    rates: dict[tuple, float] = {}
    widths = {} if packed else pack_widths(specs, cfg.raw["pack"])
    if packed:
        steps_per_s = steps_per_s or 1.0  # the per-run table's rate is not used
    rate_key = lambda r: (*shape_key(specs[r]), widths.get(r, 0))  # noqa: E731
    if steps_per_s is None:
        # the start-up banner's measurement and cache (`cached_rate`, eager step): one figure
        # per shape and machine, each shape timed once, and said while it is
        cache = Layout(cfg.outdir).steps_per_s
        for run_id, spec in specs.items():
            key = rate_key(run_id)
            if key not in rates:
                rates[key] = cached_rate(
                    spec,
                    str(device),
                    threads,
                    cache,
                    width=widths.get(run_id, 0),
                    steps=20,
                    say=say,
                )

    rows = []
    for run_id, e in expected(specs, measured, tau_coef).items():
        spec = specs[run_id]
        rate = steps_per_s if steps_per_s is not None else rates[rate_key(run_id)]
        rows.append(
            {
                "run_id": run_id,
                "experiments": ",".join(
                    sorted({r.experiment for r in cfg.runs if r.run_id == run_id})
                ),
                "d": spec.task.d,
                "tau": e.tau,
                "tau_source": e.source,
                "max_steps": spec.train.max_steps,
                "expected_steps": e.steps,
                "steps_per_s": rate,
                "expected_s": run_seconds(spec, e, rate),
            }
        )
    df = pd.DataFrame(rows)
    total_s = float(df.expected_s.sum())
    wall_s = wall_seconds(list(df.expected_s), jobs)
    out = {
        "preset": cfg.preset,
        "runs": len(df),
        "budget_steps": int(df.max_steps.sum()),
        "expected_steps": int(df.expected_steps.sum()),
        "measured_taus": int((df.tau_source == "measured").sum()),
        "tau_coef": tau_coef,
        "tau_coef_note": coef_note,
        "lower_bound": lower_bound,  # c, so every expected step and time, is a lower bound
        "steps_per_s": {_shape_name(k): v for k, v in rates.items()} if rates else steps_per_s,
        "device": str(device),
        "threads": threads,
        "jobs": jobs,
        "cpu_seconds": total_s,
        "wall_seconds": wall_s,
        "table": df,
    }
    if packed:
        out["packed"] = _packed(
            cfg, specs, df, device, rates_path, say, pack_jobs or PACK_JOBS, gpu_mem_gb
        )
    report(out, say)
    return out


def _packed(cfg, specs, df, device, rates_path, say, slots, memory_gb) -> dict:
    if rates_path is not None:
        rates = json.loads(Path(rates_path).read_text())
    else:  # the most common shape measured here
        common = Counter(map(shape_key, specs.values())).most_common(1)[0][0]
        ref = next(s for s in specs.values() if shape_key(s) == common)
        say(f"measuring pack rates on {device} at {shape_of(ref)}")
        linear = next((s for s in specs.values() if s.model.kind == "linear"), None)
        rates = measure_rates(ref, device, say=say, linear=linear)
    steps = dict(zip(df.run_id, df.expected_steps, strict=True))
    taus = {r: None if pd.isna(t) else t for r, t in zip(df.run_id, df.tau, strict=True)}
    evals = {r: n_evaluations(specs[r], steps[r], taus[r]) for r in specs}
    max_runs = int(cfg.raw["pack"]["max_runs"])
    batched = rates["device"] != "cpu"  # train_pack evaluates together on a GPU
    memory_gb = memory_gb if memory_gb is not None else rates.get("device_mem_gb")
    res = packed_wall_seconds(specs, steps, evals, rates, max_runs, batched, slots, memory_gb)
    return {"rates": rates, "max_runs": max_runs, "slots": slots, "memory_gb": memory_gb, **res}


def _shape_name(key: tuple) -> str:
    m, batch, seq_len, _, engine, compiled, precision, *width = key
    arch = "linear" if m.kind == "linear" else f"L{m.n_layers} d{m.d_model} mlp{m.d_mlp}"
    return (
        f"{arch}, batch {batch}, T {seq_len}, engine {engine}"
        + (", compiled" if compiled else "")
        + ("" if precision == "fp32" else f", {precision}")
        + (f", packs of {width[0]}" if width and width[0] else "")
    )


def report(out: dict, say=print) -> None:
    df = out["table"]
    say(f"preset {out['preset']}: {out['runs']} distinct runs on {out['device']}")
    say(f"step budget (sum of max_steps): {out['budget_steps']:,}")
    say(
        f"expected steps: {out['expected_steps']:,} ({out['measured_taus']} runs measured in "
        f"tau.csv or run logs; the rest: tau = c D^{D_EXPONENT}, early stop at factor x tau)"
    )
    if out["tau_coef"] is not None:
        say(f"  c = {out['tau_coef']:.4g} ({out['tau_coef_note']})")
    else:
        say("  no tau available: every run assumed to use its full budget")
    packed = out.get("packed") is not None  # then the pack rates are reported below
    if not packed and isinstance(out["steps_per_s"], dict):
        for k, v in out["steps_per_s"].items():
            say(f"  measured {v:.1f} steps/s: {k}")
    elif not packed:
        say(f"  {out['steps_per_s']} steps/s (given) for every run")
    per_exp = df.assign(experiments=df.experiments.str.split(",")).explode("experiments")
    g = per_exp.groupby("experiments").agg(
        runs=("run_id", "size"),
        budget=("max_steps", "sum"),
        steps=("expected_steps", "sum"),
        seconds=("expected_s", "sum"),
    )
    say(
        f"{'exp':<6}{'runs':>5}{'budget':>12}{'expected':>12}"
        + ("" if packed else f"{'cpu time':>10}")
    )
    for name, r in g.iterrows():
        say(
            f"{name:<6}{int(r.runs):>5}{int(r.budget):>12,}{int(r.steps):>12,}"
            + ("" if packed else f"{duration(r.seconds):>10}")
        )
    shared = df[df.experiments.str.contains(",")]
    say(
        f"{'all':<6}{len(df):>5}{int(df.max_steps.sum()):>12,}{int(df.expected_steps.sum()):>12,}"
        + ("" if packed else f"{duration(df.expected_s.sum()):>10}")
        + "  (distinct runs: each once)"
    )
    if not shared.empty:
        pairs = Counter(shared.experiments)
        say(
            f"  {len(shared)} run(s) are listed by two or more experiments and count in each of "
            "their rows above, once in `all`: "
            + ", ".join(f"{k.replace(',', ' + ')} {n}" for k, n in sorted(pairs.items()))
        )
    say(
        "the start-up banner reads the same rate cache and calibration, but times only the "
        "most common shape and scales the others by parameters x tokens: its total differs "
        "by that scaling alone"
    )
    p = out.get("packed")
    least = "at least " if out.get("lower_bound") else ""
    if least:
        say(
            "the calibration run did not cross in its time (c is a lower bound): every expected "
            "step and time here is a lower bound; --calibrate-s longer, or --tau-coef, or an "
            "outdir with measured taus gives an estimate"
        )
    if p is None:
        say(
            f"expected training time: {least}{duration(out['cpu_seconds'])} of "
            f"{out['threads']}-thread jobs; wall {least or '~'}{duration(out['wall_seconds'])} "
            f"with {out['jobs']} parallel jobs (evaluation included, diagnostics not)"
        )
        return
    r = p["rates"]
    say(
        f"packed on one device ({r['device']}, rates at {r['shape']}): "
        + ", ".join(f"{w} runs {1 / v['step_s']:.0f} steps/s" for w, v in r["pack"].items())
    )
    for pid, n, secs in sorted(p["packs"], key=lambda x: -x[2]):
        say(f"  {pid}: {n} runs, {duration(secs)} alone")
    if any(pid.startswith("linear") for pid, _, _ in p["packs"]):
        say(
            "  (linear-baseline packs: their measured pack steps)"
            if r.get("linear_pack")
            else "  (linear-baseline packs: the transformer's measured pack step at their width; "
            "the rates have none of their own: an upper bound)"
        )
    if p["alone_s"]:
        say(f"  runs that cannot be packed, one by one: {duration(p['alone_s'])}")
    say(
        f"expected training wall time with pack.enabled (max_runs {p['max_runs']}), packs one "
        f"after another: {duration(p['serial_s'])} (evaluation included, diagnostics not)"
    )
    mem = sum(x.memory_gb for x in p["schedule"])
    limit = (
        f"within {p['memory_gb']:.0f} GiB" if p["memory_gb"] is not None else "memory not checked"
    )
    say(
        f"side by side (up to {p['slots']} train_pack jobs, {limit}; the packs' estimated "
        f"memory {mem:.1f} GiB in all), as modelled (mbc.planning.timing): "
        f"{duration(p['wall_s'])}"
    )
    say(
        f"  (the packs' work at the device's best measured throughput: {duration(p['device_s'])}; "
        "no arrangement is faster in this model)"
    )
    for x in sorted(p["schedule"], key=lambda x: x.start_s):
        say(f"  {x.pack_id}: {duration(x.start_s)} -> {duration(x.end_s)} ({x.memory_gb:.1f} GiB)")
    other = [k for k in ("pack_bf16", "pack_tf32") if k in r]
    say(
        "  arithmetic: the rates are "
        + str(r["shape"].get("precision", "fp32"))
        + ("" if other else "; the rates file has no bf16 or TF32 pack rates (not estimated)")
    )


def main(argv: list[str] | None = None) -> dict:
    from mbc.core.cli import json_file, positive_float, positive_int

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", default="paper", help="paper or a preset of config.yaml")
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--outdir", default=None, help="override the preset's outdir")
    ap.add_argument("--steps-per-s", type=positive_float, default=None, help="skip the measurement")
    ap.add_argument("--tau-coef", type=positive_float, default=None, help="c of tau = c D^1.2")
    ap.add_argument(
        "--calibrate-s", type=positive_float, default=60.0, help="calibration run time cap"
    )
    ap.add_argument(
        "--jobs", type=positive_int, default=None, help="parallel jobs (cores / threads)"
    )
    ap.add_argument("--device", default=None, help="auto, cpu or cuda (default: the config's)")
    ap.add_argument(
        "--rates",
        type=json_file,
        default=None,
        help="pack rates (benchmarks/gpu_check.sh): a packed estimate",
    )
    ap.add_argument(
        "--pack-jobs",
        type=positive_int,
        default=None,
        help=f"packs side by side (default {PACK_JOBS})",
    )
    ap.add_argument(
        "--gpu-mem-gb",
        type=positive_float,
        default=None,
        help="device memory (default: the rates')",
    )
    a = ap.parse_args(argv)
    try:
        return estimate(
            a.preset,
            a.config,
            a.outdir,
            a.steps_per_s,
            a.tau_coef,
            a.calibrate_s,
            a.jobs,
            device=a.device,
            rates_path=a.rates,
            pack_jobs=a.pack_jobs,
            gpu_mem_gb=a.gpu_mem_gb,
        )
    except RuntimeError as exc:  # --device cuda without CUDA
        raise SystemExit(f"mbc.estimate: {exc}") from None
    except (mbc_config.ConfigFileError, mbc_config.ConfigError) as exc:
        raise SystemExit(f"mbc.estimate: {exc}") from None


if __name__ == "__main__":
    from mbc.core.cli import run

    run(main)

"""The start-up banner: what a `snakemake` invocation is about to do and what it costs.

Printed once by the main Snakemake process before any job runs (also under `-n`): the
preset, the device, the runs (trained, left to train), their expected training steps,
the expected wall time for the given --cores (or, on Slurm, the compute time), the disk
the runs will use, and, for the paper preset on a CPU, a plain warning with the cheaper
presets' commands.

It must be fast, so it trains nothing. Steps and seconds come from the cost model that
`mbc.estimate` uses too (`mbc.planning.cost`): the expected steps from measured taus where
they exist (tau.csv or run logs, `mbc.planning.cost.measured_taus`), else from the power law
tau = c D^1.2 fitted to those, else from the step budget (then an upper bound, said so).
Steps/s is measured once per (machine, shape family) on the most common shape left to
train, 5 eager steps (never compiled), and cached in `<outdir>/.mbc/steps_per_s.json` per
`mbc.planning.cost.shape_key`; other shapes are scaled by their parameter count x batch x
sequence length. `python -m mbc.estimate` is the careful
version (every shape measured, a calibration run when nothing is measured).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Set as AbstractSet
from pathlib import Path

from mbc.core.artifacts import dumps_strict, write_text_atomic
from mbc.core.config_loader import CoreConfig
from mbc.core.journal import finished, read_journal, resume_point
from mbc.core.layout import Layout
from mbc.core.packing import configured_packs, pack_widths
from mbc.core.spec import RunSpec
from mbc.core.units import duration, size
from mbc.machine.probe import cuda_available

BYTES_PER_PARAM = 4  # fp32 weights in every snapshot


def _cost(spec: RunSpec, n_params: int) -> float:
    """Work of one training step, up to a constant: parameters x tokens per batch."""
    return n_params * spec.train.batch_size * spec.task.seq_len


def machine_rates() -> Path:
    """Rates measured on this machine, kept outside every outdir: a dry run leaves the outdir
    as it was, yet times a shape once, not at every invocation."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "mbc" / "steps_per_s.json"


def _read_cache(path: Path, valid, what: str, entry: str, again: str) -> dict:
    """A machine's cache (rates, calibrations): missing, or torn by a concurrent writer:
    {}. A file that is not a mapping, or entries that are not `valid`, are discarded with
    one line (`again`: what happens instead): a hand-edited or foreign cache must not stop
    the start-up after the repair."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        print(f"mbc: {path}: not a mapping of {what}, discarded ({again})", file=sys.stderr)
        return {}
    good = {k: v for k, v in known.items() if valid(v)}
    if len(good) < len(known):
        bad = next(v for k, v in known.items() if k not in good)
        print(
            f"mbc: {path}: {len(known) - len(good)} entry(ies) not {entry} (such as {bad!r}), "
            f"discarded ({again})",
            file=sys.stderr,
        )
    return good


def _read_json(path: Path) -> dict[str, float]:
    """A rate cache: shape key -> steps/s, each a positive finite number."""
    rates = _read_cache(path, _is_rate, "rates", "a steps/s number", "measured again")
    return {k: float(v) for k, v in rates.items()}


def _is_rate(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _write_json(path: Path, known: dict) -> None:
    with contextlib.suppress(OSError):  # a read-only cache only costs a measurement next time
        write_text_atomic(path, dumps_strict(known, indent=1))


def calibration_cache() -> Path:
    """Calibration runs' taus on this machine (`mbc.estimate`), kept outside every outdir
    beside the rate cache (`machine_rates`): a second estimate trains nothing."""
    return machine_rates().with_name("calibration.json")


def read_calibrations() -> dict[str, tuple[int, bool]]:
    """The calibration cache: "run id|device|cap" -> (tau, crossed). Missing or torn by a
    concurrent writer: {} (calibrated again). Not such a mapping, or an entry of another
    shape (hand-edited, foreign): discarded with one line, calibrated again."""
    known = _read_cache(
        calibration_cache(),
        _is_calibration,
        "calibrations",
        "a [tau, crossed] pair",
        "calibrated again",
    )
    return {k: (v[0], v[1]) for k, v in known.items()}


def _is_calibration(value: object) -> bool:
    """[tau, crossed]: a whole number of steps >= 1 and a bool."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], int)
        and not isinstance(value[0], bool)
        and value[0] >= 1
        and isinstance(value[1], bool)
    )


def calibrated_coef(specs: dict[str, RunSpec]) -> tuple[float, str] | None:
    """c of tau = c D^1.2 from a calibration run `mbc.estimate` trained on this machine for
    one of these runs, where no tau is measured yet: the banner and the estimate then give
    one figure. None: no such calibration (or it did not cross: a lower bound only, which
    the banner does not use)."""
    from mbc.planning.cost import D_EXPONENT

    for key, (tau, crossed) in read_calibrations().items():
        run_id = key.split("|", 1)[0]
        if run_id in specs and crossed:
            d = specs[run_id].task.d
            return tau / d**D_EXPONENT, f"c from the calibration run {run_id}"
    return None


def cached_rate(
    spec: RunSpec,
    device: str,
    threads: int,
    cache: Path,
    write: bool = True,
    width: int = 0,
    steps: int = 5,
    say=None,
    measure: bool = True,
) -> float | None:
    """Run-steps/s of `spec` on this machine (5 timed steps; of a pack of `width` runs when
    width > 0, `mbc.planning.timing.measure_steps_per_s`), cached per shape and width in the
    outdir (not written when `write` is false: a dry run leaves the outdir as it was) and in
    `machine_rates()`, so that no shape is timed twice on one machine (`mbc.estimate` reads
    and writes the same entries: the two give one figure for one shape). say: told what is
    timed, before it is (a measurement takes seconds to minutes). measure=False: a cached
    rate or None (a dry run times nothing)."""
    import dataclasses

    from mbc.planning.cost import shape_key

    # The eager step: a cold torch.compile would hold every start-up for about a minute, and
    # the compiled step is only 1.1-1.2x faster (README "Training speed"), so the time shown
    # stays an upper bound.
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, compile=False))
    key = f"{device}|{threads}|{shape_key(spec)}|step {step_code_id()}" + (
        f"|packs of {width}" if width else ""
    )
    known = _read_json(cache)
    if key in known:  # the common start-up: the outdir's cache answers
        return float(known[key])
    import torch

    from mbc.core.provenance import cpu_model
    from mbc.planning.timing import measure_steps_per_s

    machine_key = f"{cpu_model()}|torch {torch.__version__}|{key}"
    mine = _read_json(machine_rates())
    if machine_key in mine:
        rate = float(mine[machine_key])
    elif not measure:  # a dry run times nothing: unknown until a run measures it
        return None
    else:
        from mbc.training.setup import pick_device

        torch.set_num_threads(threads)
        if say is not None:
            m = spec.model
            arch = "linear" if m.kind == "linear" else f"L{m.n_layers} d{m.d_model}"
            say(
                f"timing {steps} training steps of {arch}, batch {spec.train.batch_size}, "
                f"{spec.train.precision}" + (f", packs of {width}" if width else "")
            )
        rate = measure_steps_per_s(spec, pick_device(device), steps=steps, width=width)
        _write_json(machine_rates(), {**mine, machine_key: rate})
    if write:
        _write_json(cache, {**known, key: rate})
    return rate


# The modules whose code a training step runs (`PackedRuns.step`): a rate measured before
# they changed is not this code's rate.
STEP_MODULES = ("forward", "model", "packed", "packed_adamw", "packed_models", "setup")


def step_code_id() -> str:
    """A short hash of the training step's code (`STEP_MODULES`): part of every rate's cache
    key, so that a rate measured on older code is measured again, not reused."""
    import hashlib

    import mbc.training

    root = Path(mbc.training.__file__).parent
    h = hashlib.sha256()
    for name in STEP_MODULES:
        h.update((root / f"{name}.py").read_bytes())
    return h.hexdigest()[:12]


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the file system that holds `path` (its nearest existing parent)."""
    p = path.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def arithmetic_lines(cfg: CoreConfig) -> list[str]:
    """What `auto` chose and why (train.precision / compile, pack.enabled), and a warning
    where an explicit precision is the slow one on this machine."""
    a = cfg.arithmetic
    lines = []
    if a is not None:
        compiled = {s.train.compile for s in cfg.specs.values()}
        lines.append(
            f"mbc: arithmetic (auto): {a.why()}; "
            f"{'packed' if cfg.raw['pack'].get('enabled') else 'unpacked'}, "
            f"{'compiled' if compiled == {True} else 'eager' if compiled == {False} else 'compiled where asked'}"
            + a.compile_words()
        )
    if cfg.slow_precision:
        lines.append(cfg.slow_precision)
    return lines


def timing_lines(
    cfg: CoreConfig,
    *,
    cores: int | None,
    executor: str = "local",
    retrain: AbstractSet[str] = frozenset(),
    deadline: str | None = None,
) -> list[str]:
    """The banner's timed lines alone (the steps/s of the most common shape left to train,
    measured in 5 steps or cached, and the expected wall time), for Snakemake's `onstart`:
    it runs them only when it runs jobs, so `-n`, `--lint` and `--list-changes` time
    nothing. The lines the untimed banner printed at start-up are left out."""
    untimed = set(banner_lines(cfg, cores=cores, executor=executor, measure=False, retrain=retrain))
    timed = banner_lines(
        cfg, cores=cores, executor=executor, measure=True, retrain=retrain, deadline=deadline
    )
    return [line for line in timed if line not in untimed]


def expected_runs(cfg: CoreConfig, todo: dict[str, RunSpec], logs: dict[str, list[dict]]):
    """(run id -> `Expected`, the tau law's c, its words, run id -> resume point) for the
    runs left to train: measured taus first, else c D^1.2 with c from the measured taus or
    this machine's calibration (`python -m mbc.estimate`)."""
    from mbc.planning.cost import expected, measured_taus, tau_law

    specs = cfg.specs
    measured = measured_taus(cfg.outdir, specs, logs)
    coef, n_law = tau_law(specs, measured)
    law = f"c from {n_law} measured taus"
    if coef is None and (cal := calibrated_coef(specs)) is not None:
        coef, law = cal  # the same law `python -m mbc.estimate` calibrated on this machine
    # a resume point counts only with its file: without it the run starts again from 0
    layout = Layout(cfg.outdir)
    starts = {r: resume_point(logs[r]) if layout.run(r).resume.exists() else 0 for r in todo}
    return expected(todo, measured, coef, starts), coef, law, starts


def seconds_per_run(
    cfg: CoreConfig,
    todo: dict[str, RunSpec],
    exp: dict,
    device: str,
    write: bool,
    say=None,
    measure: bool = True,
) -> tuple[dict[str, float], float] | None:
    """(run id -> expected seconds of training and evaluation here, the steps/s measured on
    the most common shape): that shape timed (`cached_rate`), the others at its rate scaled
    by their work per step (`_cost`)."""
    from mbc.planning.cost import n_parameters, run_seconds

    common = Counter((s.model, s.train.batch_size, s.task.seq_len) for s in todo.values())
    ref_id, ref = next(
        (r, s)
        for r, s in todo.items()
        if (s.model, s.train.batch_size, s.task.seq_len) == common.most_common(1)[0][0]
    )
    widths = pack_widths(cfg.specs, cfg.raw["pack"])
    width = widths.get(ref_id, 0) if device == "cpu" else 0
    threads = int(cfg.raw.get("threads", 1))
    rate = cached_rate(
        ref, device, threads, Layout(cfg.outdir).steps_per_s, write, width, say=say, measure=measure
    )
    if rate is None:
        return None
    ref_cost = _cost(ref, n_parameters(ref))
    seconds = {
        r: run_seconds(spec, exp[r], rate * ref_cost / _cost(spec, n_parameters(spec)))
        for r, spec in todo.items()
    }
    return seconds, rate


def banner_lines(
    cfg: CoreConfig,
    *,
    cores: int | None,
    executor: str = "local",
    measure: bool = True,
    dry_run: bool = False,
    retrain: AbstractSet[str] = frozenset(),
    from_store: AbstractSet[str] = frozenset(),
    deadline: str | None = None,
) -> list[str]:
    """The banner's lines. `measure=False` skips the steps/s measurement (no time shown);
    `deadline`: the invocation's (`--config deadline=`): the wall time of every run left is
    said to be more than it starts;
    `dry_run` writes nothing (the measurement is not cached); `retrain`: runs whose resume
    state the start-up repair moves aside (they train again, whatever their logs say);
    `from_store`: runs the run store restores (in a dry run, before they are in the outdir)."""
    specs = cfg.specs
    layout = Layout(cfg.outdir)
    out = Path(cfg.outdir)
    device = str(cfg.raw.get("device", "auto"))
    threads = int(cfg.raw.get("threads", 1))
    # trained: its log says finished (a missing or moved-aside summary is rebuilt from it);
    # the logs are read once, here, and give the taus of runs in progress below too
    logs = {r: read_journal(layout.run(r).log) for r in specs}
    stored = {r for r in specs if layout.run(r).stored.is_file()} | set(from_store)
    done = {r for r in specs if (finished(logs[r]) or r in stored) and r not in retrain}
    todo = {r: s for r, s in specs.items() if r not in done}
    if device == "auto" and todo:  # torch, slow to import, only where a GPU driver is
        device = "cuda" if cuda_available() else "cpu"
    where = "(nothing to train, so no device chosen)" if device == "auto" else f"on {device}"
    lines = [
        f"mbc: preset {cfg.preset} -> {cfg.outdir}/ {where} ({threads} thread(s) per "
        f"training job, --cores {cores if cores else 'n/a'})",
        f"mbc: {len(specs)} distinct runs: {len(done)} trained"
        + (f" ({len(stored & done)} from the run store)" if stored & done else "")
        + f", {len(todo)} to train",
        *arithmetic_lines(cfg),
    ]
    coarse = sorted({s.eval.every for s in specs.values() if not s.eval.dense_every})
    if coarse:  # a legitimate, cheaper choice, but every crossing moves to that grid
        lines.append(
            f"mbc: eval.dense_every is 0 for {sum(not s.eval.dense_every for s in specs.values())}"
            f" run(s): their tau and every onset are located to eval.every = "
            f"{', '.join(map(str, coarse))} steps only (the author's 50 needs dense_every: 50)"
        )
    if not todo:
        lines.append("mbc: nothing to train; analysis, figures and the paper rebuild as needed")
        return lines
    pack = cfg.raw["pack"]
    if pack.get("enabled"):
        packs = [m for m in configured_packs(specs, pack).values() if set(m) & set(todo)]
        alone = len(todo) - sum(len(set(m) & set(todo)) for m in packs)
        lines.append(
            f"mbc: pack.enabled: they train in {len(packs)} pack job(s) of up to "
            f"{pack['max_runs']} runs ({alone} alone: not packable); "
            + (
                "the times below are at the packed step's rate"
                if device == "cpu"
                else "the times below are for one run per job (`python -m mbc.estimate "
                "--device cuda` estimates packs on one GPU)"
            )
        )

    # torch comes with these: only paid when something is left to train (every Snakemake
    # start-up, a figure rebuilt alone included, passes through here)
    from mbc.planning.cost import D_EXPONENT, n_parameters, wall_seconds
    from mbc.training.schedule import eval_schedule

    exp, coef, law, starts = expected_runs(cfg, todo, logs)
    steps = {r: e.steps for r, e in exp.items()}
    upper = any(e.upper for e in exp.values())
    budget = sum(s.train.max_steps for s in todo.values())
    resumed = {r: n for r, n in starts.items() if n}
    lines.append(
        f"mbc: {sum(steps.values()):,} training steps expected (budget {budget:,}"
        + (
            f"; {sum(resumed.values()):,} of them done: {len(resumed)} run(s) continue from "
            "a resume point"
            if resumed
            else ""
        )
        + "); "
        + (
            f"tau = c D^{D_EXPONENT} with {law}"
            if coef is not None
            else "no tau measured yet: every run at its full budget (an upper bound)"
        )
    )

    params = {r: n_parameters(spec) for r, spec in todo.items()}
    disk = 0.0
    for r, spec in todo.items():
        snaps = [
            s
            for s in eval_schedule(spec.eval, spec.train.max_steps)[1]
            if starts[r] < s <= steps[r]  # those before the resume point are on disk
        ]
        # snapshots, plus the resume state (weights and two Adam moments)
        disk += (len(snaps) + 3) * params[r] * BYTES_PER_PARAM
    lines.append(
        f"mbc: disk for the runs left to train: {'at most' if upper else 'about'} {size(disk)}"
    )
    free = _free_bytes(out)
    if free is not None and free < disk:
        lines.append(
            f"mbc: WARNING: {out}/ has {size(free)} free, less than the runs may need: a job "
            "that fills the disk fails (ENOSPC) and resumes once space is freed"
        )

    if measure:
        t0 = time.perf_counter()
        timed: list[str] = []  # cached_rate says what it times, only when it times it
        seconds, rate = seconds_per_run(cfg, todo, exp, device, not dry_run, say=timed.append)
        total = sum(seconds.values())
        bound = "at most " if upper else ""
        if executor == "local":
            # --cores above this machine's count does not run more jobs at once
            jobs = max(1, min(cores or 1, os.cpu_count() or 1) // threads)
            wall = wall_seconds(list(seconds.values()), jobs)
            # a rate read from a cache was measured earlier: say so, not "in 0.1 s"
            took = time.perf_counter() - t0
            how = f"measured in {took:.1f} s" if timed else "measured earlier here"
            scope = (
                f" for every run left (the deadline {deadline} starts only the runs it named)"
                if deadline
                else ""
            )
            lines.append(
                f"mbc: expected training wall time {bound}{duration(wall)}{scope} with {jobs} "
                f"parallel job(s), training only: diagnostics, figures and the report come on top "
                f"({duration(total)} of training in all; {rate:.1f} steps/s on the most common "
                f"shape, {how}; `python -m mbc.estimate` measures every shape)"
            )
        else:
            lines.append(
                f"mbc: {bound}{duration(total)} of training jobs at this machine's speed; the wall "
                "time depends on the cluster's queue and nodes"
            )
    if cfg.preset == "paper" and device == "cpu":
        lines.append(
            "mbc: WARNING: the paper preset on a CPU takes days (see above). Smaller presets: "
            "`snakemake --cores 8 all --config preset=quick` (the main claims, small model) "
            "or `--config preset=paper_cpu` (the paper's model, its cheap corner); or run on "
            "a GPU (README: GPU and Slurm)"
        )
    return lines

"""The cost model: the training steps, evaluations and seconds a set of runs is expected to
take, as a pure function of their specs, the taus measured so far and measured step rates.
It measures nothing: `mbc.planning.timing` times steps, `measured_taus` reads the taus an
outdir holds so far; the start-up banner (`mbc.planning.banner`) and `mbc.estimate` pass
what they measured and print what this returns.

Expected steps of a run: its measured steps if it finished; else, once tau is known
(measured, or from the law tau = c D^1.2 with c the median of tau / D^1.2 over the measured
transformer taus), early_stop_tau_factor x tau, capped by the budget; a run whose early
stop waits for the first-target crossing, or reads the training log's first-target series
(train.early_stop_series train_log: E12), counts from FIRST_TARGET_RATIO x tau.
Linear-baseline runs (never transition) cost their whole budget, and so do label-noise runs
whose stop reads the clean-label L_cand (it never meets the stop's loss bound). On the
training log's series label noise stops too: the network memorises the corrupted labels
(paper_cpu's E12 at p = 0.05-0.2, K = 20: first crossing at 9,750-10,500 steps, 2.5-2.7x the
clean run's tau of 3,850; running-mean L1 at 30k steps 4e-6 to 7e-4 against a bound of 0.06).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mbc.core.journal import logged_tau, read_journal
from mbc.core.layout import Layout
from mbc.core.spec import VOCAB, RunSpec
from mbc.training.schedule import eval_schedule

D_EXPONENT = 1.2  # the paper's tau ~ D^1.2, independent of K
# A planning figure, not a result: the first-target tau of paper_cpu's lr, batch and
# z-sharing runs at K = 20-36 (2026-12-04, measured/paper_cpu/tau.csv) came at 1.6-4.1 tau,
# median 2.9 for E7 (1.2-1.7 tau for E1 / E2)
FIRST_TARGET_RATIO = 3.0


def shape_key(spec: RunSpec) -> tuple:
    """Runs with equal keys cost the same per step."""
    t, o = spec.task, spec.train
    return (spec.model, o.batch_size, t.seq_len, t.n_targets, o.engine, o.compile, o.precision)


def measured_taus(
    outdir: str, specs: dict[str, RunSpec], logs: dict[str, list[dict]] | None = None
) -> dict[str, dict]:
    """run_id -> {"tau", "steps"} from tau.csv, else from run logs in progress (`logs`: run
    id -> its log's rows, where the caller has read them already)."""
    out: dict[str, dict] = {}
    layout = Layout(outdir)
    tau_csv = Path(layout.table("tau"))
    if tau_csv.exists():
        df = pd.read_csv(tau_csv).drop_duplicates("run_id")
        for row in df.itertuples():
            if row.run_id in specs:
                tau = None if pd.isna(row.tau) else float(row.tau)
                steps = getattr(row, "steps", float("nan"))
                out[row.run_id] = {"tau": tau, "steps": None if pd.isna(steps) else int(steps)}
    for run_id in specs:
        if run_id in out:
            continue
        rows = logs[run_id] if logs is not None else read_journal(layout.run(run_id).log)
        tau = logged_tau(rows)
        if tau is not None:
            out[run_id] = {"tau": float(tau), "steps": None}
    return out


def n_parameters(spec: RunSpec) -> int:
    """The parameters of a run's model, counted from its shape (no torch: the start-up banner
    sizes the snapshots with it). tests/test_cost.py pins it to the built model's count."""
    m, t = spec.model, spec.task
    if m.kind == "linear":  # w1: one-hot [B; z] -> hidden, w2: hidden -> every target
        n_in, n_out = m.linear_n_in(t), t.n_targets * VOCAB
        return n_in * m.linear_hidden + m.linear_hidden + m.linear_hidden * n_out + n_out
    d, h = m.d_model, m.d_mlp
    attention = 3 * d * d + 3 * d + d * d + d  # qkv and out projections, with biases
    mlp = d * h + h + h * d + d
    block = 2 * d + attention + 2 * d + mlp  # two LayerNorms (scale and shift)
    return VOCAB * d + m.n_positions * d + m.n_layers * block + 2 * d + d * VOCAB + VOCAB


# per train_pack process: the CUDA context and the caching allocator's slack, which the
# allocator's peak does not count (an allowance, not measured here)
PROCESS_GB = 0.5


def run_memory_gb(spec: RunSpec) -> float:
    """Estimated device memory of one run in a pack: fp32 weights, gradients and AdamW's two
    moments; the weight copies kept every eval.dense_every steps until the next evaluation
    (at most every / dense_every - 1); and the activations one step keeps for its backward
    (per token and layer: the residual-width tensors, the MLP's hidden pair and the
    attention pattern and its scores; the logits three times)."""
    m, t, ev = spec.model, spec.task, spec.eval
    b = spec.train.batch_size
    n = n_parameters(spec)
    kept = max(0, ev.every // ev.dense_every - 1) if ev.dense_every else 0
    state = (4 + kept) * n
    logits = 3 * b * t.n_targets * VOCAB
    if m.kind == "linear":
        acts = b * (m.linear_n_in(t) + m.linear_hidden) + logits
    else:
        per_token = 8 * m.d_model + 2 * m.d_mlp + 2 * m.n_heads * t.seq_len
        acts = b * t.seq_len * m.n_layers * per_token + logits
    return 4 * (state + acts) / 2**30


def training_memory_gb(spec: RunSpec) -> float:
    """`run_memory_gb` without the kept weight copies: what a bare training step holds
    (gpu_check's measured peak, `mbc.planning.timing.time_pack_step`)."""
    ev = spec.eval
    kept = max(0, ev.every // ev.dense_every - 1) if ev.dense_every else 0
    return run_memory_gb(spec) - 4 * kept * n_parameters(spec) / 2**30


def pack_memory_gb(specs: list[RunSpec]) -> float:
    """Estimated device memory of a pack's process (`run_memory_gb` of each run, plus
    `PROCESS_GB`): what the workflow's train and train_pack jobs declare as `gpu_mem_mb`."""
    return PROCESS_GB + sum(run_memory_gb(s) for s in specs)


def tau_law(specs: dict[str, RunSpec], measured: dict[str, dict]) -> tuple[float | None, int]:
    """(c, n): c of tau = c D^1.2, the median of tau / D^1.2 over the n measured taus of
    transformer runs (None when there is none)."""
    law = [
        m["tau"] / specs[r].task.d ** D_EXPONENT
        for r, m in measured.items()
        if m["tau"] is not None and specs[r].model.kind == "transformer"
    ]
    return (statistics.median(law) if law else None), len(law)


@dataclass(frozen=True)
class Expected:
    tau: float | None  # measured, or c D^1.2; None: unknown (the budget is then an upper bound)
    source: str  # "measured" or "law"
    steps: int
    start: int = 0  # the resume point it continues from (steps before it are paid)
    upper: bool = False  # steps is the budget, an upper bound (tau unknown, or stop not met)


def expected(
    specs: dict[str, RunSpec],
    measured: dict[str, dict],
    coef: float | None,
    starts: dict[str, int] | None = None,
) -> dict[str, Expected]:
    """run id -> its expected tau and steps (`measured`: run id -> {"tau", "steps"};
    `starts`: run id -> the resume point a run in progress continues from). A run in
    progress already at or past its expected stop has not met the stop's loss bound: it
    may train to its budget (an upper bound, as its progress line says)."""
    out = {}
    for r, spec in specs.items():
        m, start = measured.get(r), (starts or {}).get(r, 0)
        if m is not None:
            tau, source, steps = m["tau"], "measured", expected_steps(spec, m["tau"], m["steps"])
        else:
            tau = None if coef is None else coef * spec.task.d**D_EXPONENT
            source, steps = "law", expected_steps(spec, tau, None)
        upper = tau is None and spec.model.kind == "transformer"
        if start > 0 and steps <= start:
            steps, upper = spec.train.max_steps, True
        out[r] = Expected(tau, source, steps, start, upper)
    return out


def expected_steps(spec: RunSpec, tau: float | None, measured_steps: int | None) -> int:
    t = spec.train
    if measured_steps is not None:
        return measured_steps
    if tau is None or spec.model.kind == "linear" or t.early_stop_tau_factor <= 0:
        return t.max_steps
    on_log = t.early_stop_series == "train_log"
    if spec.task.label_noise > 0 and not on_log:  # noise keeps L_cand off the stop's bound
        return t.max_steps
    waits_first = t.early_stop_first_target or t.early_stop_first_target_log or on_log
    clock = tau * FIRST_TARGET_RATIO if waits_first else tau
    return min(t.max_steps, math.ceil(t.early_stop_tau_factor * clock))


def n_evaluations(spec: RunSpec, steps: int, tau: float | None = None) -> float:
    """Evaluations of a run of `steps` steps: its schedule's, and with eval.dense_every the
    kept weights evaluated where a threshold is crossed, counted as one tau's worth of
    steps at the dense spacing (the transition runs from the z-usage onset, ~tau/2, to
    convergence, ~1.5 tau), or none for a run without tau."""
    e = spec.eval
    n_evals = sum(1 for s in eval_schedule(e, spec.train.max_steps)[0] if s <= steps)
    if e.dense_every and tau is not None:
        n_evals += min(tau, steps) / e.dense_every * (1 - e.dense_every / e.every)
    return n_evals


def eval_step_equivalents(spec: RunSpec, steps: int, tau: float | None = None) -> float:
    """Evaluation cost of a run of `steps` steps (`n_evaluations`), in training-step
    equivalents: (n_contexts x (K + 1)) sequences forward per evaluation, one third of a
    training step per batch_size sequences."""
    n_ctx = min(spec.eval.n_contexts, spec.task.d)
    seqs = n_ctx * (spec.task.k + 1)
    return n_evaluations(spec, steps, tau) * seqs / (3 * spec.train.batch_size)


def run_seconds(spec: RunSpec, e: Expected, steps_per_s: float) -> float:
    """Seconds of one run's training and in-loop evaluation at `steps_per_s`, from its
    resume point (`e.start`) on."""
    evals = eval_step_equivalents(spec, e.steps, e.tau)
    if e.start:
        evals -= eval_step_equivalents(spec, e.start, e.tau)
    return (e.steps - e.start + evals) / steps_per_s


def wall_seconds(seconds: list[float], jobs: int) -> float:
    """Wall time of runs taking `seconds` each on `jobs` parallel jobs: the total shared
    out, but never less than the longest run."""
    return max(sum(seconds) / max(jobs, 1), max(seconds, default=0.0))

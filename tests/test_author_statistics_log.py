"""The author's statistics read off the training log and his sampled evaluation (spec
section 7: E12's logged transition, E14's lag, E6's window on 32 fresh groups, E13 on the
first target token), each against a case whose answer is known."""

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_spec
from torch import nn

from mbc.core.spec import B_LEN, VOCAB, EvalSpec, TaskSpec, TrainSpec
from mbc.diagnostics.config_sections import Dip, Lag, Lead, Plateau, Summary, Transition
from mbc.diagnostics.logged import logged_statistics
from mbc.diagnostics.summary import TAU_COLUMNS
from mbc.training import author_log
from mbc.training.data import build_dataset
from mbc.training.metrics import evaluate, make_eval_batch
from mbc.training.train import train_run

DIAG = Summary(
    plateau=Plateau(start_fraction=0.2, onset_fraction=0.9, end_at_z_onset=True),
    lead=Lead(delta_z_onset=0.1, loss_onset_fraction=0.9),
    first_target_threshold=0.5,
    transition=Transition(start_fraction=0.95, end_fraction=0.05),
    dip=Dip(),
    lag=Lag(0.1),
)
LOG_K = math.log(20)


def _log(l1, sampled=None) -> pd.DataFrame:
    steps = np.arange(1, len(l1) + 1) * 50
    return pd.DataFrame(
        {
            "step": steps,
            "n_batches": 50,
            "train_first_loss": l1,
            "train_first_shuffled_loss": np.nan,
            "delta_z_train_first": np.nan,
            "candidate_loss_sampled": np.nan if sampled is None else sampled,
        }
    )


def test_the_logged_first_target_tau_is_the_first_window_below_half_log_k():
    # running means 3.0 (windows 50-550), then 1.4 (< 0.5 log 20 = 1.498) from step 600 on
    l1 = [3.0] * 11 + [1.4] * 5 + [0.01] * 4
    got = logged_statistics(_log(l1), LOG_K, DIAG)
    assert got["first_target_tau_log"] == 600 and got["first_target_log_censored"] is False
    # the lag: the first window below 0.1 x the first (0.3): 0.01 at step 850
    assert got["lag_step"] == 850 and got["lag_censored"] is False


def test_a_log_that_never_crosses_is_censored_and_one_without_the_series_is_not_measured():
    got = logged_statistics(_log([3.0] * 10), LOG_K, DIAG)
    assert got["first_target_tau_log"] is None and got["first_target_log_censored"] is True
    assert got["lag_step"] is None and got["lag_censored"] is True
    none = logged_statistics(_log([np.nan] * 10), LOG_K, DIAG)
    assert none["first_target_tau_log"] is None and none["first_target_log_censored"] is False
    assert logged_statistics(None, LOG_K, DIAG)["transition_sampled_censored"] is False


def test_the_lag_is_relative_to_the_first_logged_window():
    # a first window of 2.0: the lag mark is 0.2, not 0.1 x log K
    got = logged_statistics(_log([2.0, 1.0, 0.5, 0.25, 0.19, 0.1]), LOG_K, DIAG)
    assert got["lag_step"] == 250


def test_the_sampled_window_is_read_off_the_sampled_series():
    # last sampled L_cand > 0.95 log K at step 200, first < 0.05 log K at step 400
    hi, mid, lo = 0.99 * LOG_K, 0.5 * LOG_K, 0.01 * LOG_K
    sampled = [hi, hi, hi, hi, mid, mid, mid, lo, lo, lo]
    got = logged_statistics(_log([3.0] * 10, sampled), LOG_K, DIAG)
    assert (got["transition_start_sampled"], got["transition_end_sampled"]) == (200, 400)
    assert got["transition_duration_sampled"] == 200
    assert got["transition_sampled_censored"] is False
    open_window = logged_statistics(_log([3.0] * 10, [hi] * 5 + [mid] * 5), LOG_K, DIAG)
    assert open_window["transition_sampled_censored"] is True
    # never above 0.95 log K before t_end: his analyze_lr_sweep.py marks it no_transition
    # and drops it, so it has no duration; not censored either (it did close)
    no_start = logged_statistics(_log([3.0] * 10, [mid] * 5 + [lo] * 5), LOG_K, DIAG)
    assert no_start["transition_end_sampled"] == 300
    assert no_start["transition_start_sampled"] is None
    assert no_start["transition_duration_sampled"] is None
    assert no_start["transition_sampled_censored"] is False
    for c in ("first_target_tau_log", "lag_step", "transition_duration_sampled"):
        assert c in TAU_COLUMNS


def test_e11s_dip_is_read_off_the_sampled_series_as_his_script_read_it():
    """His E11 duration: first sampled L_cand below log K (a noisy plateau dips early) to the
    first below 0.5 nats. Planted: the 32-group mean wanders about log K and first dips at
    step 100; it is below 0.5 nats from step 450 on."""
    up, down, mid, low = 1.03 * LOG_K, 0.98 * LOG_K, 0.5 * LOG_K, 0.4
    sampled = [up, down, up, up, up, mid, mid, mid, low, low]
    got = logged_statistics(_log([3.0] * 10, sampled), LOG_K, DIAG)
    assert (got["dip_start_sampled"], got["dip_end_sampled"]) == (100, 450)
    assert got["dip_duration_sampled"] == 350 and got["dip_censored_sampled"] is False
    never = logged_statistics(_log([3.0] * 10, [up, down] + [mid] * 8), LOG_K, DIAG)
    assert never["dip_censored_sampled"] is True and never["dip_bound_sampled"] == 400
    unmeasured = logged_statistics(_log([3.0] * 10), LOG_K, DIAG)
    assert unmeasured["dip_duration_sampled"] is None
    assert unmeasured["dip_censored_sampled"] is False
    assert {f"{c}_sampled" for c in ("dip_duration", "dip_censored")} <= set(TAU_COLUMNS)


def test_the_live_config_reads_e11s_duration_on_his_evaluation():
    """E11 logs the sampled evaluation, and the beta of H1 and of the scorecard reads the dip
    on it; ours on the fixed evaluation stands beside it."""
    from pathlib import Path

    from mbc import config as mbc_config

    root = Path(__file__).resolve().parents[1]
    cfg = mbc_config.load(mbc_config.read_yaml(root / "config.yaml"), {"preset": "paper"})
    e11 = [r.spec for r in cfg.runs if r.experiment == "E11"]
    assert e11 and all(s.eval.sampled_groups == 32 for s in e11)
    stats = {st.name: st.as_dict() for st in cfg.statistics.declared}
    assert stats["sharing_duration_beta"]["y"] == "dip_duration_sampled"
    assert stats["sharing_duration_beta_fixed"]["y"] == "dip_duration"
    for lead in ("lead_fraction_log_mean", "lead_fraction_log_k_spearman"):
        assert stats[lead]["where"]["lead_log"] == {"above": 0}  # his runs with a lead > 0


def test_the_authors_draw_is_a_pure_function_of_the_step():
    task = TaskSpec(k=5, n_groups=40)
    a, b = author_log.sampled_contexts(task, 32, 150), author_log.sampled_contexts(task, 32, 150)
    assert torch.equal(a, b) and not torch.equal(a, author_log.sampled_contexts(task, 32, 200))
    groups = (a // task.k).tolist()
    assert len(set(groups)) == 32  # 32 distinct groups, one example (one z) each
    ds = build_dataset(task, 0)
    assert torch.equal(ds.group[a], a // task.k)  # example g K + j belongs to group g
    assert len(author_log.sampled_contexts(TaskSpec(k=3, n_groups=12), 32, 50)) == 12


class _ZBlind(nn.Module):
    """A model that reads B and never z: at each target position, the group's candidates'
    characters there, in proportion to how many candidates have them (`marginal`), or, at
    the first position only, uniform over the K distinct first characters."""

    def __init__(self, ds, task):
        super().__init__()
        self.task = task
        self.by_base = {
            tuple(ds.clean_tokens[g * task.k, 1 : 1 + B_LEN].tolist()): g
            for g in range(task.n_groups)
        }
        self.candidates = ds.candidates

    def forward(self, tokens: torch.Tensor, **_) -> torch.Tensor:
        out = torch.full((tokens.shape[0], self.task.n_targets, VOCAB), -1e4, dtype=torch.float64)
        for i, row in enumerate(tokens[:, 1 : 1 + B_LEN].tolist()):
            cands = self.candidates[self.by_base[tuple(row)]]  # (K, n_targets)
            for p in range(self.task.n_targets):
                counts = torch.bincount(cands[:, p], minlength=VOCAB).double()
                out[i, p, counts > 0] = counts[counts > 0].log()
        return out


def test_a_z_blind_model_sits_at_exactly_log_k_on_the_first_target_but_above_it_on_l_cand():
    task = TaskSpec(k=10, n_groups=30)
    ds = build_dataset(task, 0)
    examples = torch.arange(task.n_groups * task.k)
    m = evaluate(_ZBlind(ds, task), make_eval_batch(ds, examples, np.random.default_rng(0)))
    log_k = math.log(task.k)
    assert m["first_target_loss"] == pytest.approx(log_k, abs=1e-9)  # first characters distinct
    # every later character predicted from B alone: the candidates score unequally
    assert m["candidate_loss"] > 1.02 * log_k


def _label_noise_spec(**train):
    spec = tiny_spec(label_noise=0.2)
    return dataclasses.replace(
        spec,
        train=dataclasses.replace(
            spec.train,
            max_steps=2000,
            early_stop_tau_factor=2.0,
            early_stop_loss_fraction=0.1,
            **train,
        ),
    )


def test_label_noise_runs_stop_on_the_authors_series(tmp_path):
    """With early_stop_series train_log, a noisy run stops once its logged L1 (on the
    corrupted labels it memorises) has converged after 2 x its logged crossing, long before
    its budget; the crossing is logged, and the summary reads the same step."""
    spec = _label_noise_spec(early_stop_series="train_log")
    assert spec.run_id != _label_noise_spec().run_id  # the stop is part of the run id
    said: list[str] = []
    train_run(
        spec,
        build_dataset(spec.task, spec.seed),
        tmp_path / "r",
        torch.device("cpu"),
        say=said.append,
    )
    rows = [
        json.loads(x) for x in (tmp_path / "r" / "state" / "log.jsonl").read_text().splitlines()
    ]
    (crossed,) = [r for r in rows if r.get("event") == "first_target_tau_log"]
    done = rows[-1]
    assert done["event"] == "done" and done["step"] < spec.train.max_steps
    assert done["step"] >= 2 * crossed["step"]
    assert any("logged first-target tau" in s for s in said)
    log = pd.read_csv(tmp_path / "r" / "train_log.csv")
    got = logged_statistics(log, spec.task.log_k, DIAG)
    assert got["first_target_tau_log"] == crossed["step"]


def test_the_stop_clock_waits_for_every_crossing_it_is_asked_to():
    """stop_clock: tau; the latest of tau and the evaluated and logged first-target
    crossings it waits for (E7); None while one of them has not come."""
    from types import SimpleNamespace

    from mbc.training.run_state import RunState

    def clock(tau, first, first_log, **train):
        flags = {"early_stop_first_target": False, "early_stop_first_target_log": False}
        flags.update(train)
        spec = SimpleNamespace(train=SimpleNamespace(early_stop_series="candidate", **flags))
        me = SimpleNamespace(spec=spec, tau=tau, first_tau=first, first_tau_log=first_log)
        return RunState.stop_clock(me)

    assert clock(300, 500, 650) == 300
    assert clock(300, 500, 650, early_stop_first_target=True) == 500
    both = {"early_stop_first_target": True, "early_stop_first_target_log": True}
    assert clock(300, 500, 650, **both) == 650
    assert clock(300, 500, None, **both) is None  # the logged window has not crossed yet
    assert clock(300, None, 650, early_stop_first_target_log=True) == 650
    assert clock(None, 500, 650, **both) is None


def test_an_e7_run_stops_only_after_its_logged_first_target_crossing(tmp_path):
    """With train.early_stop_first_target_log the run is not stopped before the first
    training-log window whose running-mean L1 is below 0.5 log K (his E7 tau), which it
    logs as an event; the summary's first_target_tau_log is that step, not censored."""
    spec = tiny_spec()
    train = dict(early_stop_tau_factor=1.0, early_stop_loss_fraction=0.9, max_steps=2000)
    spec = dataclasses.replace(
        spec,
        train=dataclasses.replace(
            spec.train, early_stop_first_target=True, early_stop_first_target_log=True, **train
        ),
        eval=dataclasses.replace(spec.eval, every=20, dense_every=10, n_log=0),
    )
    plain = dataclasses.replace(
        spec, train=dataclasses.replace(spec.train, early_stop_first_target_log=False)
    )
    assert spec.run_id != plain.run_id
    assert "early_stop_first_target_log" not in plain.to_dict()["train"]
    train_run(spec, build_dataset(spec.task, spec.seed), tmp_path / "r", torch.device("cpu"),
              say=lambda s: None)  # fmt: skip
    rows = [
        json.loads(x) for x in (tmp_path / "r" / "state" / "log.jsonl").read_text().splitlines()
    ]
    (crossed,) = [r for r in rows if r.get("event") == "first_target_tau_log"]
    (first,) = [r for r in rows if r.get("event") == "first_target_tau"]
    done = rows[-1]
    assert done["event"] == "done" and done["step"] < spec.train.max_steps
    assert done["step"] >= max(crossed["step"], first["step"])
    got = logged_statistics(pd.read_csv(tmp_path / "r" / "train_log.csv"), spec.task.log_k, DIAG)
    assert got["first_target_tau_log"] == crossed["step"]
    assert got["first_target_log_censored"] is False


def test_the_sampled_evaluation_is_logged_beside_the_fixed_one(tmp_path):
    spec = tiny_spec()
    spec = dataclasses.replace(spec, eval=dataclasses.replace(spec.eval, sampled_groups=8))
    assert isinstance(spec.eval, EvalSpec) and isinstance(spec.train, TrainSpec)
    train_run(
        spec,
        build_dataset(spec.task, spec.seed),
        tmp_path / "r",
        torch.device("cpu"),
        say=lambda m: None,
    )
    log = pd.read_csv(tmp_path / "r" / "train_log.csv")
    assert log["candidate_loss_sampled"].notna().all() and (log["step"] % 10 == 0).all()
    # 8 groups of K = 3 candidates: at most log K once trained, and a real loss at the start
    assert 0 < log["candidate_loss_sampled"].iloc[0] < 3 * spec.task.log_k
    metrics = pd.read_csv(tmp_path / "r" / "metrics.csv")
    assert len(metrics) > 0  # the fixed evaluation is still there


def test_the_sampled_tau_is_the_first_sampled_window_below_the_threshold():
    """His D-law tau: candidate tau on the sampled evaluation, strictly below 0.5 log K."""
    lk = LOG_K
    sampled = [lk, lk, 0.6 * lk, 0.5 * lk, 0.45 * lk, 0.7 * lk, 0.1 * lk]  # a noisy dip at 250
    got = logged_statistics(_log([3.0] * 7, sampled), lk, DIAG, threshold=0.5)
    assert got["tau_sampled"] == 250 and got["tau_sampled_censored"] is False
    assert (
        logged_statistics(_log([3.0] * 7, sampled), lk, DIAG, threshold=0.3)["tau_sampled"] == 350
    )
    never = logged_statistics(_log([3.0] * 4, [lk] * 4), lk, DIAG)
    assert never["tau_sampled"] is None and never["tau_sampled_censored"] is True
    unlogged = logged_statistics(_log([3.0] * 4), lk, DIAG)  # no sampled series: not measured
    assert unlogged["tau_sampled"] is None and unlogged["tau_sampled_censored"] is False
    assert {"tau_sampled", "tau_sampled_censored", "tau_sampled_bound"} <= set(TAU_COLUMNS)


def test_a_censored_sampled_tau_is_bounded_only_by_a_budget_run_to_its_end():
    """A run that ran its budget bounds its censored sampled tau by it; one stopped early
    (our tau's early stop, say) bounds nothing: the fit leaves it out and counts it."""
    from mbc.diagnostics.summary import summarize_run

    spec = tiny_spec(k=20)  # max_steps 120
    lk = spec.task.log_k
    steps = np.arange(0, 130, 10)
    metrics = pd.DataFrame(
        {
            "step": steps,
            "candidate_loss": np.full(len(steps), lk),
            "delta_z": 0.0,
            "candidate_accuracy": 0.0,
            "first_target_loss": lk,
            "delta_z_first": 0.0,
        }
    )
    log = _log([3.0] * 2, [lk] * 2)
    full = summarize_run(spec, metrics, DIAG, log)
    assert full["tau_sampled_censored"] is True and full["tau_sampled_bound"] == 120
    stopped = summarize_run(spec, metrics[metrics.step <= 60], DIAG, log)
    assert stopped["tau_sampled_censored"] is True and stopped["tau_sampled_bound"] is None
    crossed = summarize_run(spec, metrics, DIAG, _log([3.0] * 2, [lk, 0.1 * lk]))
    assert crossed["tau_sampled"] == 100 and crossed["tau_sampled_bound"] is None


def test_the_d_law_fit_reads_the_sampled_tau_and_leaves_out_an_unbounded_censored_run():
    from mbc.analysis.config_sections import Bootstrap
    from mbc.analysis.fit_tables import _fit

    d = np.array([1000, 2000, 4000, 8000, 16000])
    rows = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(6)],
            "d": [*d, 32000],
            "tau_sampled": [*(3 * d**1.2).astype(int), None],
            "tau_sampled_censored": [False] * 5 + [True],
            "tau_sampled_bound": [None] * 6,  # stopped before its budget
        }
    ).astype({"tau_sampled": "Int64", "tau_sampled_bound": "Int64"})
    fit, n_div, n_left = _fit(rows, "tau_sampled_vs_d", "d", "tau_sampled", Bootstrap(50, 0.95, 0))
    assert fit.exponent == pytest.approx(1.2, abs=0.01)
    assert (fit.n, n_left, n_div) == (5, 1, 0)


def test_a_summary_written_before_the_sampled_tau_is_not_measured_not_censored():
    """An outdir's older summary.json (no tau_sampled keys): its run is left out of the
    author's fits as unmeasured, and the censoring column stays boolean."""
    from mbc.core.config_loader import Run
    from mbc.diagnostics.summary import tau_table

    new, older = tiny_spec(k=5), tiny_spec(k=7)
    base = {"tau": 100, "censored": False, "steps": 120}
    summaries = {
        new.run_id: {**base, "tau_sampled": 90, "tau_sampled_censored": False},
        older.run_id: dict(base),
    }
    tau = tau_table([Run("E1", new), Run("E1", older)], summaries)
    assert tau["tau_sampled_censored"].tolist() == [False, False]
    assert tau["tau_sampled"].isna().tolist() == [False, True]


def _sampled_curve(tau_at_half: int, k: int, steps: np.ndarray) -> pd.DataFrame:
    """A sampled series falling linearly in time from log K at step 0, through 0.5 log K at
    `tau_at_half`: below f log K first at the first step after (1 - f) / 0.5 x tau_at_half."""
    lk = math.log(k)
    frac = np.clip(1.0 - 0.5 * steps / tau_at_half, 0.0, 1.0)
    return pd.DataFrame({"step": steps, "candidate_loss_sampled": frac * lk})


def test_e4_reads_the_sampled_tau_at_every_threshold_with_tau_csvs_bound():
    """E4 on the author's evaluation: each run's sampled series re-read at another
    threshold; a run that never crosses is bounded only where it ran its budget, one
    without the series is neither measured nor censored."""
    from mbc.analysis.fit_tables import retau_sampled

    steps = np.arange(0, 2001, 50)
    tau = pd.DataFrame(
        {
            "run_id": ["a", "never_full", "never_stopped", "no_log"],
            "k": [20, 20, 20, 20],
            "steps": [2000, 2000, 900, 2000],
            "train.max_steps": [2000, 2000, 2000, 2000],
        }
    )
    flat = pd.DataFrame({"step": steps, "candidate_loss_sampled": LOG_K})
    logs = {
        "a": _sampled_curve(1000, 20, steps),
        "never_full": flat,
        "never_stopped": flat[flat.step <= 900],
    }
    at_half = retau_sampled(tau, logs, 0.5)
    # 0.5 log K reached exactly at 1000: "below" is strict, so the next evaluation
    assert at_half.tau_sampled.tolist()[0] == 1050
    assert retau_sampled(tau, logs, 0.3).tau_sampled.tolist()[0] == 1450  # 0.3 at 1400
    assert retau_sampled(tau, logs, 0.7).tau_sampled.tolist()[0] == 650  # 0.7 at 600
    assert at_half.tau_sampled_censored.tolist() == [False, True, True, False]
    bound = at_half.tau_sampled_bound.tolist()
    assert bound[1] == 2000 and pd.isna(bound[2]) and pd.isna(bound[3])
    assert pd.isna(at_half.tau_sampled.tolist()[3]), "no series: not measured"


def test_e4s_sampled_sweep_recovers_a_planted_d_law_beside_ours():
    """A planted tau = c D^1.2 law in the sampled series (and D^1.0 in the fixed one): the
    table's sampled rows recover 1.2 at every threshold, its fixed rows 1.0."""
    from mbc.analysis.config_sections import Bootstrap, ThresholdSensitivity
    from mbc.analysis.fit_tables import threshold_table

    d = np.array([3000, 5000, 10000, 20000, 36000])
    steps = np.arange(0, 400_001, 50)
    tau, metrics, logs = [], [], {}
    for i, di in enumerate(d):
        run = f"r{i}"
        tau.append(
            {
                "run_id": run,
                "experiment": "E1",
                "model": "transformer",
                "k": 20,
                "d": di,
                "steps": 400_000,
                "train.max_steps": 400_000,
                "diverged": False,
                "batch_size": 128,
            }
        )
        logs[run] = _sampled_curve(int(0.5 * di**1.2), 20, steps)
        fixed = _sampled_curve(int(2.0 * di), 20, steps)
        metrics.append(
            pd.DataFrame(
                {"run_id": run, "step": steps, "candidate_loss": fixed.candidate_loss_sampled}
            )
        )
    cfg = ThresholdSensitivity(("E1",), "d", (0.3, 0.5, 0.7))
    table = threshold_table(
        cfg, pd.DataFrame(tau), pd.concat(metrics), Bootstrap(50, 0.95, 0), sampled=logs
    )
    assert table.evaluation.tolist() == ["fixed"] * 3 + ["sampled"] * 3
    fixed, sampled = table[table.evaluation == "fixed"], table[table.evaluation == "sampled"]
    assert fixed.exponent.to_numpy() == pytest.approx(1.0, abs=0.02)
    assert sampled.exponent.to_numpy() == pytest.approx(1.2, abs=0.02)
    assert sampled.name.tolist()[1] == "tau_sampled_vs_d_thr0.5"
    # without the logs the sampled rows are there, unmeasured
    alone = threshold_table(cfg, pd.DataFrame(tau), pd.concat(metrics), Bootstrap(50, 0.95, 0))
    assert (alone[alone.evaluation == "sampled"].n == 0).all()


def test_the_authors_lag_runs_train_their_whole_budget_in_every_preset():
    """His E14 runs trained 5k steps without an early stop; his lag is the first logged
    window below 0.1 x the first, which a stop on the candidate loss could cut short."""
    from pathlib import Path

    from mbc import config as mbc_config
    from mbc.core.arithmetic import Arithmetic

    raw = mbc_config.read_yaml(Path(__file__).resolve().parents[1] / "config.yaml")
    amx = Arithmetic("cpu", "amx", "planted")  # the same on any CPU, no timing probe
    for preset in ("smoke", "quick", "paper_cpu", "paper"):
        cfg = mbc_config.load(raw, {"preset": preset}, arithmetic=amx)
        lag_runs = cfg.run_ids("E14_author")
        assert lag_runs, preset
        assert all(cfg.specs[r].train.early_stop_tau_factor == 0 for r in lag_runs), preset

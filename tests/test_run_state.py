"""The run's decisions (`mbc.training.run_state.RunState`) on planted series: its crossings
(tau, the first-target tau, the logged first-target tau), its early stop and its
divergence, and a resume that replays the logged rows into the same decisions. No
training: rows in, decisions out."""

import dataclasses
import math

import pytest

from mbc.core.divergence import bound
from mbc.core.spec import VOCAB, EvalSpec, ModelSpec, RunSpec, TaskSpec, TrainSpec
from mbc.training import author_log
from mbc.training.run_state import WINDOW, RunState

LOG_K = math.log(3)
MARK = 0.5 * LOG_K  # eval.threshold log K: the crossings' bound
LOW = 0.1 * LOG_K  # below the mark, above the early stop's 0.02 log K
DONE = 0.01 * LOG_K  # below the early stop's loss condition


def spec(**train) -> RunSpec:
    """K = 3, evaluations on a grid of 10 steps, an early stop at 3 x its clock."""
    t = {"max_steps": 1000, "early_stop_tau_factor": 3.0, "early_stop_loss_fraction": 0.02}
    return RunSpec(
        task=TaskSpec(k=3, n_groups=12),
        model=ModelSpec(n_layers=2, n_heads=2, d_model=32, d_mlp=64),
        train=TrainSpec(**{**t, **train}),
        eval=EvalSpec(every=20, n_log=5, dense_every=10, threshold=0.5),
    )


def row(step: int, cand: float, first: float = math.nan, train: float = 1.0) -> dict:
    return {
        "step": step,
        "train_loss": train,
        "loss": cand,
        "candidate_loss": cand,
        "first_target_loss": first,
    }


def window(step: int, mean: float) -> dict:
    return {"event": WINDOW, "step": step, "n_batches": 10, "train_first_loss": mean}


def drive(state: RunState, lines: list[dict]) -> tuple[list[dict], int | None]:
    """Feed the logged `lines` (evaluation rows and windows, in step order) as the record
    does; (the log as written: each line with its crossings' events, the step of the early
    stop or None)."""
    log = []
    for line in lines:
        if line.get("event") == WINDOW:
            crossed = state.window(line)
            log += [crossed.event] if crossed else []
            log.append(line)
            continue
        log.append(line)
        log += [c.event for c in state.evaluation(line)]
        if line["step"] and state.stops(line["step"], line):
            return log, line["step"]
    return log, None


def test_the_window_event_is_the_training_logs():
    assert WINDOW == author_log.EVENT


def test_tau_is_the_first_grid_row_below_the_mark():
    s = RunState(spec())
    series = [(0, 1.1), (20, 0.9), (40, 0.6), (60, 0.5), (80, 0.3), (100, 0.2)]
    made = {step: s.evaluation(row(step, cand)) for step, cand in series}
    assert s.tau == 60  # 0.5 < 0.5 log 3 = 0.549; 0.6 is not
    assert [c.event for c in made[60]] == [{"event": "tau", "step": 60, "tau": 60}]
    assert "tau = 60 (L_cand < 0.5 log K)" in made[60][0].said
    assert all(made[step] == [] for step, _ in series if step != 60)  # logged once


def test_a_row_off_the_grid_does_not_cross():
    s = RunState(spec())
    assert s.evaluation(row(5, 0.1)) == []  # a log-spaced row before the grid: a curve's start
    assert s.tau is None
    s.evaluation(row(10, 0.1))
    assert s.tau == 10


def test_equality_and_nan_are_no_crossing():
    s = RunState(spec())
    for step, cand in [(10, MARK), (20, math.nan), (30, MARK - 1e-9)]:
        s.evaluation(row(step, cand))
    assert s.tau == 30


def test_the_first_target_crossing_is_logged_only_when_the_stop_waits_for_it():
    rows = [row(20, 1.0, 1.0), row(40, 0.3, 0.8), row(60, 0.2, 0.7), row(80, 0.1, 0.4)]
    plain, waits = RunState(spec()), RunState(spec(early_stop_first_target=True))
    for r in rows:
        plain.evaluation(r)
    events = [c.event["event"] for r in rows for c in waits.evaluation(r)]
    assert plain.first_tau is None and plain.stop_clock() == 40
    assert (waits.tau, waits.first_tau) == (40, 80)
    assert events == ["tau", "first_target_tau"]
    assert waits.stop_clock() == 80  # the later of the two


def test_the_early_stop_counts_factor_x_tau_and_needs_the_loss_condition():
    rows = [row(20, 1.0), row(40, LOW)]  # tau = 40: the stop from step 120 on
    rows += [row(100, DONE), row(120, LOW), row(140, DONE), row(160, DONE)]
    _, stopped = drive(RunState(spec()), rows)
    assert stopped == 140  # 100: too early; 120: L_cand above 0.02 log K
    _, never = drive(RunState(spec(early_stop_tau_factor=0)), rows)
    assert never is None  # factor 0: no early stop


def test_the_train_log_series_stops_on_its_windows():
    """early_stop_series train_log: the clock is the first window whose running-mean L1 is
    below the mark, the loss condition the last window's mean."""
    s = RunState(spec(early_stop_series="train_log"))
    lines = [window(10, 1.0), row(10, LOW), window(20, LOW), row(20, LOW)]  # clock 20
    lines += [window(50, DONE), row(50, 1.0), window(60, LOW), row(60, DONE)]
    lines += [window(70, DONE), row(70, 1.0)]
    log, stopped = drive(s, lines)
    assert s.first_tau_log == 20
    assert {"event": "first_target_tau_log", "step": 20} in log
    # its event before the window that made it, once
    assert log.index({"event": "first_target_tau_log", "step": 20}) == log.index(lines[2]) - 1
    assert sum(x.get("event") == "first_target_tau_log" for x in log) == 1
    # 50: before 3 x 20; 60: the window's mean is not done (L_cand is: not read); 70: done
    assert stopped == 70


def test_the_logged_first_target_crossing_is_a_crossing_the_clock_waits_for():
    s = RunState(spec(early_stop_first_target_log=True))
    drive(s, [row(20, LOW), window(30, 0.9), window(40, LOW)])
    assert (s.tau, s.first_tau_log, s.stop_clock()) == (20, 40, 40)
    assert RunState(spec()).window(window(40, LOW)) is None  # no stop waits: not read


@pytest.mark.parametrize("bad", [math.nan, math.inf, 101 * math.log(VOCAB)])
def test_divergence_at_the_first_bad_training_loss(bad):
    s = RunState(spec())
    assert s.bound == bound(s.spec.train) == 100 * math.log(VOCAB)
    losses = {step: (bad if step >= 37 else 1.0) for step in range(1, 61)}
    first = next(step for step, loss in losses.items() if s.loss_diverges(loss))
    assert first == 37
    assert not s.loss_diverges(99 * math.log(VOCAB))  # under the bound


def test_divergence_of_an_evaluation_row():
    s = RunState(spec())
    assert s.divergence(row(0, 1.0, train=math.nan)) is None  # step 0: no training loss yet
    assert s.divergence(row(20, 1.0)) is None
    assert s.divergence(row(20, math.nan)) == "loss is nan"
    assert s.divergence(row(20, 1.0, train=math.inf)) == "train_loss is inf"
    reason = s.divergence(row(20, 1.0, train=1e6))
    assert reason is not None and reason.startswith("train_loss = 1e+06 >")


def test_a_diverged_run_keeps_its_step_and_a_replay_of_its_journal_finds_it():
    s = RunState(spec())
    assert s.diverge(40, row(40, math.nan)) == "loss is nan" and s.diverged == 40
    journal = [row(20, 1.0), row(40, math.nan), {"event": "diverged", "step": 40}]
    again = RunState(spec())
    again.replay([*journal, {"event": "done", "step": 40}])
    assert again.diverged == 40 and again.tau is None
    fresh = RunState(spec())
    fresh.replay(journal[:1])  # a resume point before the divergence: not diverged
    assert fresh.diverged is None


def series_e7() -> list[dict]:
    """A run whose stop waits for tau and both first-target crossings (E7's)."""
    lines = []
    for step in range(10, 301, 10):
        cand = 1.0 if step < 40 else LOW if step < 200 else DONE
        first = 1.0 if step < 70 else LOW
        lines.append(window(step, 1.0 if step < 90 else LOW))
        lines.append(row(step, cand, first))
    return lines


@pytest.mark.parametrize("cut_step", [30, 80, 150, 250])
def test_a_resume_replays_the_log_into_the_same_decisions(cut_step):
    """A resume at `cut_step` replays the log up to it into a fresh state: the same
    crossings and clock there, and from there the same events and the same stop."""
    sp = spec(early_stop_first_target=True, early_stop_first_target_log=True)
    lines = series_e7()
    whole = RunState(sp)
    log, stopped = drive(whole, lines)
    assert (whole.tau, whole.first_tau, whole.first_tau_log, stopped) == (40, 70, 90, 270)

    cut = next(i for i, x in enumerate(log) if "event" not in x and x["step"] == cut_step)
    before = RunState(sp)
    _, early = drive(before, [x for x in lines if x["step"] <= cut_step])
    resumed = RunState(sp)
    resumed.replay(log[: cut + 1])
    assert early is None
    got = (resumed.tau, resumed.first_tau, resumed.first_tau_log, resumed.window_loss)
    assert got == (before.tau, before.first_tau, before.first_tau_log, before.window_loss)
    assert resumed.stop_clock() == before.stop_clock()

    rest, again = drive(resumed, [x for x in lines if x["step"] > cut_step])
    after_cut = [x for x in log[cut + 1 :]]
    assert rest == after_cut and again == stopped


def test_a_replay_does_not_log_the_crossings_again():
    """Replayed windows make their crossing in the state only: a later window returns none."""
    s = RunState(spec(early_stop_series="train_log"))
    s.replay([window(10, LOW), {"event": "first_target_tau_log", "step": 10}, row(10, 1.0)])
    assert s.first_tau_log == 10 and s.window_loss == LOW
    assert s.window(window(20, LOW)) is None


def test_the_spec_holds_the_state_machine_to_its_config():
    """A state machine of another threshold crosses at another step."""
    sp = spec()
    s = RunState(dataclasses.replace(sp, eval=dataclasses.replace(sp.eval, threshold=0.2)))
    s.evaluation(row(20, 0.3))  # below 0.5 log 3, not below 0.2 log 3
    assert s.tau is None
    s.evaluation(row(30, 0.2))
    assert s.tau == 30

"""The cost model (mbc.planning.cost) and the one duration/size formatter (mbc.core.units),
against cases whose answers are known."""

import dataclasses
import math

import pytest
from helpers import tiny_spec

from mbc.core.spec import ModelSpec, TaskSpec
from mbc.core.units import duration, size
from mbc.planning.cost import (
    D_EXPONENT,
    FIRST_TARGET_RATIO,
    expected,
    run_seconds,
    tau_law,
    wall_seconds,
)
from mbc.training.schedule import eval_schedule


def _specs():
    base = dataclasses.replace(
        tiny_spec(), train=dataclasses.replace(tiny_spec().train, early_stop_tau_factor=3.0)
    )
    small = base
    large = dataclasses.replace(base, task=dataclasses.replace(base.task, n_groups=48))
    noisy = dataclasses.replace(base, task=dataclasses.replace(base.task, label_noise=0.1))
    linear = dataclasses.replace(base, model=dataclasses.replace(base.model, kind="linear"))
    return {"small": small, "large": large, "noisy": noisy, "linear": linear}


def test_the_tau_law_is_the_median_over_measured_transformer_taus():
    specs = _specs()
    c = 0.5
    measured = {
        "small": {"tau": c * specs["small"].task.d ** D_EXPONENT, "steps": 100},
        "large": {"tau": c * specs["large"].task.d ** D_EXPONENT, "steps": None},
        "linear": {"tau": 1.0, "steps": 40},  # a linear run's tau does not enter the law
    }
    coef, n = tau_law(specs, measured)
    assert n == 2 and math.isclose(coef, c)
    assert tau_law(specs, {}) == (None, 0)


def test_expected_steps_measured_law_and_whole_budgets():
    specs = _specs()
    d = specs["large"].task.d
    exp = expected(specs, {"small": {"tau": 30.0, "steps": 95}}, coef=0.01)
    assert exp["small"].steps == 95 and exp["small"].source == "measured"
    tau = 0.01 * d**D_EXPONENT
    assert exp["large"].source == "law" and math.isclose(exp["large"].tau, tau)
    assert exp["large"].steps == min(specs["large"].train.max_steps, math.ceil(3 * tau))
    # label noise never meets the early stop's loss bound; the linear baseline never transitions
    assert exp["noisy"].steps == exp["linear"].steps == specs["noisy"].train.max_steps
    # no tau known: the budget (an upper bound)
    assert all(e.steps == specs[r].train.max_steps for r, e in expected(specs, {}, None).items())
    # an early stop that waits for the first-target crossing counts from FIRST_TARGET_RATIO tau
    big = dataclasses.replace(specs["large"].train, max_steps=10**9)
    waits = dataclasses.replace(specs["large"], train=big)
    waits_first = dataclasses.replace(
        waits, train=dataclasses.replace(big, early_stop_first_target=True)
    )
    # so does one on the training log's first-target series (E12), label noise or not: the
    # network memorises the corrupted labels, and that series meets the stop's bound
    on_log = dataclasses.replace(big, early_stop_series="train_log")
    noisy_log = dataclasses.replace(
        waits,
        train=on_log,
        task=dataclasses.replace(waits.task, label_noise=0.2),
    )
    # and one on the logged crossing alone (E7 waits for it too)
    waits_log = dataclasses.replace(
        waits, train=dataclasses.replace(big, early_stop_first_target_log=True)
    )
    four = expected({"a": waits, "b": waits_first, "c": noisy_log, "d": waits_log}, {}, coef=0.01)
    assert four["a"].steps == math.ceil(3 * tau)
    assert (
        four["b"].steps
        == four["c"].steps
        == four["d"].steps
        == math.ceil(3 * FIRST_TARGET_RATIO * tau)
    )


def test_seconds_and_wall_time():
    spec = _specs()["small"]
    e = expected({"r": spec}, {"r": {"tau": None, "steps": 60}}, None)["r"]
    # evaluation counted in training-step equivalents on top of the 60 steps: 7 evaluations
    # (steps 0, 1, 3, 10, 20, 40, 60 of the schedule), each 36 contexts x (K + 1) = 144
    # sequences forward, a third of a training step per 16 sequences: 7 x 3 = 21 steps
    assert [s for s in eval_schedule(spec.eval, spec.train.max_steps)[0] if s <= 60] == [
        0,
        1,
        3,
        10,
        20,
        40,
        60,
    ]
    assert run_seconds(spec, e, 10.0) == pytest.approx((60 + 21) / 10.0)
    # resumed at step 20: 40 steps and the 2 evaluations after it (40, 60: 6 steps) are left
    e20 = expected({"r": spec}, {"r": {"tau": None, "steps": 60}}, None, starts={"r": 20})["r"]
    assert (e20.steps, e20.start) == (60, 20)
    assert run_seconds(spec, e20, 10.0) == pytest.approx((40 + 6) / 10.0)
    # a run in progress at or past its expected stop has not met the stop's loss bound: it
    # may train to its budget, an upper bound
    past = expected({"r": spec}, {"r": {"tau": 30.0, "steps": None}}, None, starts={"r": 100})
    assert past["r"].upper and past["r"].steps == spec.train.max_steps
    assert run_seconds(spec, past["r"], 10.0) > (spec.train.max_steps - 100) / 10.0
    assert wall_seconds([3.0, 3.0, 3.0, 3.0], 2) == 6.0
    assert wall_seconds([10.0, 1.0, 1.0], 2) == 10.0  # never less than the longest run
    assert wall_seconds([], 4) == 0.0


def test_one_formatter_for_durations_and_sizes():
    assert duration(65) == "1m05s" and duration(3700) == "1h01m"
    assert duration(3 * 86400) == "3.0 days" and duration(math.inf) == "n/a"
    assert size(512) == "512 B" and size(747_900) == "747.9 kB" and size(3.1e9) == "3.1 GB"


@pytest.mark.parametrize(
    "change",
    [
        {},  # the tiny test model
        {"model": ModelSpec()},  # the paper's model
        {"model": ModelSpec(n_layers=3, d_model=48, d_mlp=96, n_positions=40)},
        {"model": ModelSpec(kind="linear", linear_hidden=64), "task": TaskSpec(k=5, z_length=3)},
        {
            "model": ModelSpec(kind="linear", linear_hidden=64, linear_input="identity"),
            "task": TaskSpec(k=5, n_groups=30),
        },
    ],
)
def test_the_parameter_count_from_the_shape_is_the_built_models(change):
    """`n_parameters` sizes the banner's snapshots without building a model (no torch)."""
    import torch

    from mbc.planning.cost import n_parameters
    from mbc.training.model import build_model, count_parameters

    spec = dataclasses.replace(tiny_spec(), **change)
    built = build_model(spec.model, spec.task, torch.Generator().manual_seed(0))
    assert n_parameters(spec) == count_parameters(built)

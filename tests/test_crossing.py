"""The one first-crossing definition (mbc.core.crossing): tau, the onsets, the live tau event."""

import math

import numpy as np
import pytest

from mbc.core.crossing import first_crossing


def test_first_crossing_below():
    assert first_crossing(np.array([0, 5, 9]), np.array([3.0, 1.0, 0.5]), 1.0) == 9
    assert first_crossing(np.array([0, 5]), np.array([3.0, 2.0]), 1.0) is None


def test_first_crossing_finds_the_first_of_several():
    log_k = math.log(20)
    steps = [0, 100, 200, 300, 400, 500]
    loss = np.array([3.0, 1.0, 0.9, 0.2, 0.6, 0.1]) * log_k  # 0.2 log K first at step 300
    assert first_crossing(steps, loss, 0.5 * log_k) == 300
    assert first_crossing(steps, loss, 0.95 * log_k) == 200
    assert isinstance(first_crossing(steps, loss, 0.5 * log_k), int)


def test_never_crossing_is_censored():
    log_k = math.log(10)
    steps = np.arange(0, 5000, 500)
    loss = np.full(steps.size, log_k)  # plateau at log K throughout the budget
    assert first_crossing(steps, loss, 0.5 * log_k) is None
    assert first_crossing([], [], 0.5 * log_k) is None
    loss_nan = np.full(steps.size, np.nan)
    assert first_crossing(steps, loss_nan, 0.5 * log_k) is None
    assert first_crossing(steps, loss_nan, 0.5 * log_k, "above") is None


def test_crossing_is_strict_in_both_directions():
    log_k = math.log(4)
    steps = [10, 20, 30]
    threshold_value = 0.5 * log_k
    loss = [log_k, threshold_value, np.nextafter(threshold_value, 0.0)]
    assert first_crossing(steps, loss, threshold_value) == 30  # equality is not a crossing
    assert first_crossing(steps[:2], loss[:2], threshold_value) is None
    dz = [0.0, 0.1, np.nextafter(0.1, 1.0)]
    assert first_crossing(steps, dz, 0.1, "above") == 30
    assert first_crossing(steps[:2], dz[:2], 0.1, "above") is None


def test_first_crossing_rejects_bad_input():
    with pytest.raises(ValueError, match="strictly increasing"):
        first_crossing([0, 200, 100], [1.0, 1.0, 0.1], 0.5)
    with pytest.raises(ValueError, match="entries"):
        first_crossing([0, 100], [1.0], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        first_crossing([0, 100], [1.0, 0.1], math.nan)
    with pytest.raises(ValueError, match="direction"):
        first_crossing([0, 100], [1.0, 0.1], 0.5, "up")


def test_grid_rows_keep_what_the_run_summaries_read():
    """threshold_sensitivity.csv and plateau_sensitivity.csv read metrics.csv through
    grid_rows: a crossing at a log-spaced step before the grid is not seen, the grid's is."""
    import math

    import pandas as pd

    from mbc.analysis.fit_tables import retau
    from mbc.core.spec import EvalSpec, grid_every, grid_mask, grid_rows
    from mbc.core.spec import RunSpec as Spec

    steps = [0, 7, 37, 50, 100, 150]
    lcand = [1.0, 0.9, 0.4, 0.55, 0.3, 0.2]  # below 0.5 log K at 37, on the grid at 100
    m = pd.DataFrame(
        {"run_id": "a", "step": steps, "candidate_loss": [v * math.log(3) for v in lcand]}
    )
    m = pd.concat([m, m.assign(run_id="b")])
    grid = {"a": 50, "b": 0}
    kept = grid_rows(m, grid)
    assert kept[kept.run_id == "a"].step.tolist() == [0, 50, 100, 150]
    assert kept[kept.run_id == "b"].step.tolist() == steps
    assert grid_mask(EvalSpec(dense_every=50, on_grid=True), kept[kept.run_id == "a"].step).all()
    assert grid_every(Spec().eval) == Spec().eval.dense_every
    assert grid_every(EvalSpec(on_grid=False)) == 0
    tau = pd.DataFrame({"run_id": ["a", "b"], "k": [3, 3]})
    assert retau(tau, kept, 0.5).tau.tolist() == [100, 37]

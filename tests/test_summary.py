import math

import numpy as np
import pandas as pd
from helpers import tiny_spec

from mbc.summary import first_step_below, plateau_height, summarize_run

DIAG = {
    "plateau": {"start_fraction": 0.2, "onset_fraction": 0.9, "end_at_z_onset": True},
    "lead": {"delta_z_onset": 0.1, "loss_onset_fraction": 0.9},
}


def metrics(lcand, dz):
    steps = np.arange(len(lcand)) * 10
    return pd.DataFrame({"step": steps, "candidate_loss": lcand, "delta_z": dz,
                         "candidate_accuracy": np.zeros(len(lcand))})  # fmt: skip


def test_tau_strictly_below_threshold_and_censoring():
    spec = tiny_spec()  # K = 3, threshold 0.5
    lk = math.log(3)
    lc = np.array([lk, lk, 0.5 * lk, 0.49 * lk, 0.1])
    s = summarize_run(spec, metrics(lc, np.zeros(5)), DIAG)
    assert s["tau"] == 30 and not s["censored"]  # 0.5 log K itself does not count
    s = summarize_run(spec, metrics(np.full(5, lk), np.zeros(5)), DIAG)
    assert s["tau"] is None and s["censored"] and s["steps"] == 40
    assert s["height_over_log_k"] == 1.0


def test_plateau_height_window_ends_at_the_first_sign_of_transition():
    lk = math.log(5)
    # plateau at log K, a bump while z starts being used, then the drop
    lc = np.array([lk] * 10 + [1.4 * lk] * 3 + [0.2 * lk] * 3)
    dz = np.array([0.0] * 10 + [0.5] * 6)
    steps = np.arange(16) * 10
    assert plateau_height(steps, lc, lk, start_fraction=0.2, onset_fraction=0.9,
                          z_onset=100) == lk  # fmt: skip
    with_bump = plateau_height(steps, lc, lk, start_fraction=0.2, onset_fraction=0.9)
    assert with_bump > lk
    s = summarize_run(tiny_spec(k=5), metrics(lc, dz), DIAG)
    assert s["height_over_log_k"] == 1.0
    assert s["delta_z_onset"] == 100 and s["loss_onset"] == 130
    assert s["lead"] == 30 and s["lead_fraction"] == 30 / 130


def test_first_step_below():
    assert first_step_below(np.array([0, 5, 9]), np.array([3.0, 1.0, 0.5]), 1.0) == 9
    assert first_step_below(np.array([0, 5]), np.array([3.0, 2.0]), 1.0) is None

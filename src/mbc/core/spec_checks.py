"""The checks of one run's spec that the config schema cannot express (how the key's
value relates to others: K and the selector space, D and the string space, the batch and D,
...). `mbc.core.config_loader.check_spec` raises the first problem as a ConfigError naming the key
where the user wrote it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mbc.core.spec import A_LEN, B_LEN, RunSpec

N_CHARS = 36


def first_problem(spec: RunSpec, where: Callable[[str], str]) -> tuple[str, Any, str] | None:
    """(run key, value, why) of the first check `spec` fails, None if it passes them all.
    where(key): where the user wrote a key, for a message that names another key too."""
    t, m, o, e = spec.task, spec.model, spec.train, spec.eval

    if t.k < 2:
        return ("task.k", t.k, "K must be at least 2 (K = 1 has no ambiguity)")
    if t.unique_first_chars and t.k > N_CHARS:
        return ("task.k", t.k, "K > 36 is impossible with unique_first_chars (36 characters)")
    if t.k > N_CHARS**t.z_length:
        return (
            "task.z_length",
            t.z_length,
            f"only {N_CHARS**t.z_length} selectors exist for K={t.k}",
        )
    if t.n_groups > N_CHARS**B_LEN:
        return ("task.n_groups", t.n_groups, "more groups than distinct 6-character base strings")
    # Targets are unique dataset-wide; with distinct first characters each first character
    # holds about D/36 targets out of 36^3 suffixes. Keep well inside that (half) to draw fast.
    if t.d > N_CHARS**A_LEN // 2:
        return (
            "task.n_groups",
            t.n_groups,
            f"D = {t.d} targets do not fit the 4-character string space",
        )
    if t.sharing == "supergroup" and not 1 <= t.n_supergroups <= t.n_groups:
        return ("task.n_supergroups", t.n_supergroups, f"must be in [1, n_groups={t.n_groups}]")
    if not 0 <= t.label_noise < 1:
        return ("task.label_noise", t.label_noise, "must be in [0, 1)")
    if t.reverse:
        if t.label_noise > 0:
            return ("task.label_noise", t.label_noise, "label noise is defined for bz_to_a only")
        if t.n_groups < t.k:
            return (
                "task.n_groups",
                t.n_groups,
                f"{t.direction} needs n_groups >= K={t.k} for candidates",
            )
        if m.kind == "linear":
            return ("model.kind", m.kind, "the linear baseline is defined for bz_to_a only")
    if m.linear_input != "characters" and m.kind != "linear":
        # it would change the run id of a network that does not read it
        return (
            "model.linear_input",
            m.linear_input,
            "is the linear baseline's (model.kind: linear)",
        )
    if m.d_model % m.n_heads:
        return ("model.d_model", m.d_model, f"not divisible by n_heads={m.n_heads}")
    if t.seq_len - 1 > m.n_positions:
        return (
            "model.n_positions",
            m.n_positions,
            f"shorter than the input length {t.seq_len - 1}",
        )
    if o.lr <= 0:
        return ("train.lr", o.lr, "learning rate must be positive")
    if o.batch_size > t.d:
        # D = K x n_groups: name where both were written, either may be the slip
        groups = where("task.n_groups")
        return (
            "train.batch_size",
            o.batch_size,
            f"larger than the dataset D={t.d} = K {t.k} x task.n_groups {t.n_groups} "
            f"(n_groups from '{groups}')",
        )
    if e.dense_every and e.every <= 0:  # the slip is every's: dense_every has no grid to divide
        return (
            "eval.every",
            e.every,
            f"must be a positive multiple of eval.dense_every = {e.dense_every} "
            "(or set eval.dense_every: 0)",
        )
    if e.dense_every and e.every % e.dense_every:
        return ("eval.dense_every", e.dense_every, f"must divide eval.every = {e.every}")
    if not 0 < e.threshold < 1:
        return ("eval.threshold", e.threshold, "must be in (0, 1) (a fraction of log K)")
    return None

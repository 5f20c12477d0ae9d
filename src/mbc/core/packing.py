"""Which runs train together when `pack.enabled` (README "Training on a GPU"): runs of one
shape (`pack_key`) in config order, cut into packs of at most `pack.max_runs`. A pack's
id is a hash of its members, so the same runs always form the same pack (and a changed
config forms new packs whose finished runs are not trained again: their logs say done)."""

from __future__ import annotations

import hashlib

from mbc.core.spec import RunSpec


def pack_key(spec: RunSpec) -> tuple | None:
    """Runs with equal keys can train as one `mbc.training.packed.PackedRuns`: the model's
    shape, the sequence layout, the batch size and the arithmetic (precision, compile).
    None: the run cannot be packed (the linear baseline of E13)."""
    m, t = spec.model, spec.task
    if m.kind != "transformer":
        return None
    shape = (m.n_layers, m.n_heads, m.d_model, m.d_mlp, m.n_positions)
    layout = (t.seq_len, t.n_targets, t.first_pred_pos)
    return (shape, layout, spec.train.batch_size, spec.train.precision, spec.train.compile)


def make_packs(specs: dict[str, RunSpec], max_runs: int) -> dict[str, list[str]]:
    """pack id -> its run ids; a run that cannot be packed is in none."""
    if max_runs < 1:
        raise ValueError(f"pack.max_runs = {max_runs}: must be at least 1")
    by_key: dict[tuple, list[str]] = {}
    for run_id, spec in specs.items():
        key = pack_key(spec)
        if key is not None:
            by_key.setdefault(key, []).append(run_id)
    packs = {}
    for ids in by_key.values():
        for i in range(0, len(ids), max_runs):
            members = ids[i : i + max_runs]
            digest = hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:10]
            packs[f"pack{len(members)}-{digest}"] = members
    return packs

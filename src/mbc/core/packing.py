"""Which runs train together when `pack.enabled` (README "Training on a GPU"): runs of one
shape (`pack_key`) in config order, cut into packs of at most `pack.max_runs`.

A pack's id names its shape and its chunk (`L4h4d128m512-T16t5p10-B128-fp32-0`), not its
members: a run added to the config joins its shape's pack under the same id, so the
`unpack_run` jobs of the runs already there (whose input is the pack's manifest, by name)
and everything read from their tables stay up to date. Only where a shape has more than
max_runs runs can a new run move others to another chunk. A pack's finished runs are
never trained again (their logs end in `done`)."""

from __future__ import annotations

from mbc.core.spec import RunSpec


def pack_key(spec: RunSpec) -> tuple | None:
    """Runs with equal keys can train as one `mbc.training.packed.PackedRuns`: the model's
    shape, the sequence layout, the batch size and the arithmetic (precision, compile).
    The linear baseline of E13 packs with linear runs of its hidden width and z length
    (`mbc.training.packed_models.PackedLinear`). None: a model kind that cannot be packed."""
    m, t = spec.model, spec.task
    if m.label == "linear_identity":  # e_B's width is n_groups
        shape = ("linear_identity", m.linear_hidden, t.z_length, t.n_groups)
    elif m.kind == "linear":
        shape = ("linear", m.linear_hidden, t.z_length)
    elif m.kind == "transformer":
        shape = (m.n_layers, m.n_heads, m.d_model, m.d_mlp, m.n_positions)
    else:
        return None
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
    for key, ids in by_key.items():
        for chunk, i in enumerate(range(0, len(ids), max_runs)):
            packs[f"{_name(key)}-{chunk}"] = ids[i : i + max_runs]
    return packs


def configured_packs(specs: dict[str, RunSpec], pack: dict) -> dict[str, list[str]]:
    """pack id -> its run ids under config `pack` (none when packing is off)."""
    return make_packs(specs, pack["max_runs"]) if pack.get("enabled") else {}


def pack_priority(specs: list[RunSpec]) -> int:
    """The order packs start in while they wait for a slot (`train_pack`'s Snakemake
    priority, and `mbc.planning.timing.concurrent_schedule`'s model of it): their budgeted
    run-steps, so the pack with the most work starts first and the small ones fill in
    beside it."""
    return sum(s.train.max_steps for s in specs)


def pack_of(packs: dict[str, list[str]]) -> dict[str, str]:
    """run id -> the id of the pack it trains in (a run that cannot be packed is in none)."""
    return {r: p for p, members in packs.items() for r in members}


def pack_widths(specs: dict[str, RunSpec], pack: dict) -> dict[str, int]:
    """run id -> the width of the pack it trains in under config `pack` (none when packing
    is off or the run cannot be packed)."""
    return {r: len(m) for m in configured_packs(specs, pack).values() for r in m}


def _name(key: tuple) -> str:
    shape, (seq_len, n_t, p), batch, precision, compiled = key
    if shape[0] == "linear":  # `linear512z4-T16t5p10-B128-fp32-0`
        arch = f"linear{shape[1]}z{shape[2]}"
    elif shape[0] == "linear_identity":  # `linear_identity512z2G1000-T16t5p10-B128-fp32-0`
        arch = f"linear_identity{shape[1]}z{shape[2]}G{shape[3]}"
    else:
        layers, heads, d, d_mlp, _ = shape
        arch = f"L{layers}h{heads}d{d}m{d_mlp}"
    return f"{arch}-T{seq_len}t{n_t}p{p}-B{batch}-{precision}" + ("-compiled" if compiled else "")

"""A working period that ends on finished runs: `--config deadline=2h30m`.

Under a deadline, `snakemake all` starts only the runs expected to finish training within
it on this machine's parallel jobs (the banner's model: expected steps from the tau law,
this machine's measured steps/s), shortest first, and builds their summaries and
diagnostics, not the aggregated tables: the period ends on runs that `python -m
mbc.run_store add` can store, instead of on runs cut mid-way. A run that the model
misjudges still trains to its end (the deadline chooses what starts, it stops nothing);
one cut by the machine's end resumes from its last resume point next time.
"""

from __future__ import annotations

import os
import re

from mbc.core.config_loader import ConfigError, CoreConfig
from mbc.core.journal import finished, read_journal
from mbc.core.layout import Layout
from mbc.core.units import duration

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_deadline(text) -> float | None:
    """Seconds of a duration written `2h`, `2h30m`, `90m`, `1.5h` or `5400` (seconds);
    None for an empty value (no deadline). A value that is none of these raises ConfigError
    naming the key."""
    if text is None or str(text).strip() == "":
        return None
    s = str(text).strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", s):
        seconds = float(s)
    elif re.fullmatch(f"(?:{_PART.pattern})+", s):
        seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(s))
    else:
        raise ConfigError("deadline", text, "not a duration such as 2h, 2h30m, 90m or 5400 (s)")
    if seconds <= 0:
        raise ConfigError("deadline", text, "must be a positive duration")
    return seconds


def choose(seconds: dict[str, float], jobs: int, budget_s: float) -> list[str]:
    """The runs to start so that each is expected to end within `budget_s` on `jobs`
    parallel jobs: shortest first (most runs finished), each on the job that frees first,
    a run taken only while it ends in time there."""
    lanes = [0.0] * max(1, jobs)
    chosen = []
    for run_id, s in sorted(seconds.items(), key=lambda kv: (kv[1], kv[0])):
        i = min(range(len(lanes)), key=lanes.__getitem__)
        if lanes[i] + s <= budget_s:
            lanes[i] += s
            chosen.append(run_id)
    return chosen


def within(
    cfg: CoreConfig,
    budget_s: float,
    cores: int | None,
    dry_run: bool,
    from_store: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str]]:
    """(runs left to train that start under the deadline, lines for the banner);
    `from_store`: runs the run store restores (in a dry run, before they are in the outdir)."""
    from mbc.planning.banner import expected_runs, seconds_per_run

    specs = cfg.specs
    layout = Layout(cfg.outdir)
    logs = {r: read_journal(layout.run(r).log) for r in specs}
    todo = {r: s for r, s in specs.items() if not finished(logs[r]) and r not in from_store}
    if not todo:
        return [], []
    device = str(cfg.raw.get("device", "auto"))
    if device == "auto":
        from mbc.machine.probe import cuda_available

        device = "cuda" if cuda_available() else "cpu"
    exp, *_ = expected_runs(cfg, todo, logs)
    timed = seconds_per_run(cfg, todo, exp, device, write=not dry_run, measure=not dry_run)
    if timed is None:  # a dry run times nothing, and this machine's rate is not known yet
        return list(todo), [
            f"mbc: deadline {duration(budget_s)}: which of the {len(todo)} runs left start is "
            "decided when they start (this machine's steps/s is not measured yet, and a dry "
            "run times nothing)"
        ]
    seconds, _ = timed
    slower = observed_factor(cfg, logs, device)
    if slower is not None:  # the model against this machine's finished runs, as they ran
        seconds = {r: t * slower[0] for r, t in seconds.items()}
    threads = int(cfg.raw.get("threads", 1))
    jobs = max(1, min(cores or 1, os.cpu_count() or 1) // threads)
    chosen = choose(seconds, jobs, budget_s)
    busy = sum(seconds[r] for r in chosen) / jobs
    lines = [
        f"mbc: deadline {duration(budget_s)}: {len(chosen)} of the {len(todo)} runs left start "
        f"now (about {duration(busy)} of training on {jobs} job(s), shortest first"
        + (
            f"; the model's times x{slower[0]:.2f}, as {slower[1]} run(s) finished here took"
            if slower is not None
            else ""
        )
        + "); their summaries and diagnostics are built, the tables wait for the rest"
    ]
    if not chosen:
        shortest = min(seconds.values())
        lines.append(
            f"mbc: deadline: no run is expected to finish in time (the shortest takes about "
            f"{duration(shortest)} here): nothing trains"
        )
    return chosen, lines


def observed_factor(cfg: CoreConfig, logs: dict[str, list[dict]], device: str):
    """(median of wall / modelled seconds, n) over this outdir's runs that finished in one
    session on this machine's CPU, or None without any: the model times 5 bare training steps,
    so a machine busy with other work, or evaluation dearer than modelled, shows here."""
    from mbc.core.provenance import cpu_model
    from mbc.planning.banner import seconds_per_run
    from mbc.planning.cost import Expected

    here = cpu_model()
    done = {}
    for r, rows in logs.items():
        starts = [x for x in rows if x.get("event") == "start"]
        evals = [x for x in rows if "event" not in x and x.get("wall_s") is not None]
        if finished(rows) and len(starts) == 1 and starts[0].get("cpu") == here and evals:
            steps = max(x["step"] for x in rows)
            done[r] = (Expected(None, "measured", steps), float(evals[-1]["wall_s"]))
    if not done:
        return None
    specs = {r: cfg.specs[r] for r in done}
    timed = seconds_per_run(
        cfg, specs, {r: e for r, (e, _) in done.items()}, device, False, measure=False
    )
    if timed is None:
        return None
    modelled, _ = timed
    ratios = sorted(done[r][1] / modelled[r] for r in done if modelled[r] > 0)
    return (ratios[len(ratios) // 2], len(ratios)) if ratios else None

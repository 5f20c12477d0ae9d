"""Live loss curves of every run of a preset: `python -m mbc.status --preset P --plot F.png`.

Read only from what the training jobs leave on disk, as `mbc.status` is (nothing is
started, nothing is written but the picture): each run's live log, `state/log.jsonl`,
which packed and unpacked runs alike write from their first evaluation on, so running runs
are drawn too. One panel per experiment, L_cand / log K against the step (log x), runs
coloured by what varies in their experiment (K, D, lr, batch, ...; the seeds of one
configuration share a colour), the threshold line, each run's tau marked where it crossed,
and the end of each curve marked by the run's state: running, censored, diverged (a
`diverged` event in its log), stopped (interrupted or failed). Done runs end plainly.
Only the evaluation rows and the tau, diverged and done events of a log are parsed.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from mbc.core.artifacts import write_bytes_atomic
from mbc.core.config_loader import CoreConfig
from mbc.core.layout import Layout
from mbc.core.spec import RunSpec

# how the end of a curve shows the run's state (mbc.status's states; "diverged" from the log)
END_MARK = {
    "running": dict(marker="o", markerfacecolor="white", markersize=5),
    "censored": dict(marker=">", markersize=6),
    "diverged": dict(marker="X", markersize=8, color="red", markeredgecolor="black"),
    "stopped": dict(marker="s", markersize=4, color="0.5"),
}
STOPPED = ("interrupted", "failed")
_EVENTS = ('{"event": "tau"', '{"event": "diverged"', '{"event": "done"')


@dataclass
class Curve:
    """What the plot reads from one live log."""

    steps: list[int] = field(default_factory=list)
    lcand: list[float] = field(default_factory=list)
    tau: int | None = None
    diverged: int | None = None  # the step of a `diverged` event
    done: bool = False


def read_curve(path: str | Path) -> Curve:
    """The (step, L_cand) rows of a live log, its tau, diverged and done events; every other
    line (snapshots, resume points, starts) is skipped unparsed. Like `journal.read_journal`, the
    log ends at its first line that is not complete JSON (a torn last line)."""
    c = Curve()
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return c
    for line in text.splitlines():
        evaluation = line.startswith('{"step"')
        if not evaluation and not line.startswith(_EVENTS):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if evaluation:
            if row.get("candidate_loss") is not None:
                c.steps.append(row["step"])
                c.lcand.append(row["candidate_loss"])
        elif row["event"] == "tau":
            c.tau = row["tau"]
        elif row["event"] == "diverged":
            c.diverged = row["step"]
        else:
            c.done = True
    return c


def _flat(spec: RunSpec) -> dict:
    """A run's keys as the config writes them (task.k, train.lr, ...)."""
    d = spec.to_dict()
    return {f"{s}.{k}": v for s, sec in d.items() if isinstance(sec, dict) for k, v in sec.items()}


def varied_keys(specs: list[RunSpec]) -> list[str]:
    """The run keys that take more than one value among `specs` (seeds aside), with D
    (`d`) in place of n_groups when D takes no more values (E2's grid is D x K)."""
    flats = [_flat(s) for s in specs]
    if not flats:
        return []
    keys = [k for k in flats[0] if len({repr(f[k]) for f in flats}) > 1]
    if "task.n_groups" in keys and len({s.task.d for s in specs}) <= len(
        {f["task.n_groups"] for f in flats}
    ):
        keys[keys.index("task.n_groups")] = "d"
    return keys


def _label(key: str, value, labels: Mapping[str, str]) -> str:
    """A run setting in a legend, named by config `labels` (`task.unique_first_chars`:
    "distinct first characters: no"); a setting it lacks keeps its field name."""
    name = labels.get(key, key.split(".")[-1])
    if isinstance(value, bool):
        return f"{name}: {'yes' if value else 'no'}"
    if value is None:
        value = "default"
    return f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"


def _sort_key(values: tuple) -> tuple:
    return tuple((0, v) if isinstance(v, int | float) else (1, str(v)) for v in values)


def _colours(n: int) -> list:
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    return [colormaps["viridis"](x) for x in np.linspace(0, 0.95, n)]


def _state_of(state: str, curve: Curve) -> str:
    if curve.diverged is not None or state == "diverged":
        return "diverged"
    return "stopped" if state in STOPPED else state


def panel(
    ax,
    exp: str,
    runs: list[tuple[str, RunSpec]],
    curves: dict,
    states: dict,
    labels: Mapping[str, str] = MappingProxyType({}),
) -> int:
    """Draw one experiment's runs on `ax`; returns how many curves it drew (a run with no
    evaluation in its log yet has none). Each curve's line has gid `curve:<run_id>`."""
    keys = varied_keys([s for _, s in runs])
    flats = {rid: {**_flat(s), "d": s.task.d} for rid, s in runs}
    combos = sorted({tuple(flats[r][k] for k in keys) for r, _ in runs}, key=_sort_key)
    colour = dict(zip(combos, _colours(len(combos)), strict=True))
    thresholds = sorted({s.eval.threshold for _, s in runs})
    for t in thresholds:
        ax.axhline(t, color="black", ls="--", lw=0.8, zorder=1)
    ax.axhline(1.0, color="0.6", ls=":", lw=0.8, zorder=1)
    drawn, counts = 0, {}
    for rid, spec in runs:
        said = states.get(rid, "pending")
        state = _state_of(said, curves[rid])
        said = "diverged" if state == "diverged" else said
        counts[said] = counts.get(said, 0) + 1
        c = curves[rid]
        if not c.steps:
            continue
        log_k = spec.task.log_k
        steps = np.asarray(c.steps, dtype=float)
        y = np.asarray(c.lcand) / log_k
        keep = steps >= 1  # log x
        col = colour[tuple(flats[rid][k] for k in keys)]
        (line,) = ax.plot(steps[keep], y[keep], color=col, lw=1.0, alpha=0.9, zorder=2)
        line.set_gid(f"curve:{rid}")
        drawn += 1
        if c.tau is not None and c.tau in c.steps:
            i = c.steps.index(c.tau)
            ax.plot([c.tau], [y[i]], "o", color=col, ms=4, mec="black", mew=0.5, zorder=4)
        if state in END_MARK and keep.any():
            at = len(steps) - 1
            if state == "diverged" and c.diverged in c.steps:
                at = c.steps.index(c.diverged)
            style = {"color": col, "markeredgecolor": col, **END_MARK[state]}
            ax.plot([steps[at]], [y[at]], ls="none", zorder=5, **style)
    ax.set_xscale("log")
    ax.set_ylim(0, max(1.6, ax.get_ylim()[1]) if drawn else 1.6)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    ax.set_title(f"{exp}: {drawn} of {len(runs)} runs drawn\n{summary}", fontsize=8)
    if not drawn:
        ax.text(
            0.5,
            0.5,
            "no evaluation logged yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=8,
            color="0.4",
        )
        ax.set_xlim(1, 10)
    if keys and drawn:
        handles = [Line2D([], [], color=colour[c], lw=1.5) for c in combos]
        names = [
            ", ".join(_label(k, v, labels) for k, v in zip(keys, c, strict=True)) for c in combos
        ]
        ax.legend(
            handles,
            names,
            fontsize=5.5,
            loc="lower left",
            ncol=1 + len(combos) // 8,
            frameon=False,
            handlelength=1.2,
        )
    ax.tick_params(labelsize=7)
    return drawn


def draw(cfg: CoreConfig, states: dict[str, str]) -> tuple[Figure, dict[str, int]]:
    """The picture of every run of `cfg` so far, one panel per experiment (titled by its
    name); `states`: run id -> mbc.status's state. Returns it and {experiment: curves}."""
    curves = {rid: read_curve(Layout(cfg.outdir).run(rid).log) for rid in cfg.specs}
    exps: dict[str, list[tuple[str, RunSpec]]] = {}
    for r in cfg.runs:
        exps.setdefault(r.experiment, []).append((r.run_id, r.spec))
    n = max(1, len(exps))
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(3.6 * ncols, 2.9 * nrows + 0.5), dpi=90, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    drawn = {}
    for ax, (exp, runs) in zip(axes, exps.items(), strict=False):
        drawn[exp] = panel(ax, exp, runs, curves, states, cfg.raw.get("labels", {}))
    for i, ax in enumerate(axes):
        if i >= len(exps):
            ax.set_visible(False)
        elif i % ncols == 0:
            ax.set_ylabel("L_cand / log K", fontsize=8)
    for ax in axes[len(exps) - ncols : len(exps)] if exps else []:
        ax.set_xlabel("step", fontsize=8)
    key = [
        Line2D([], [], color="black", ls="--", lw=0.8, label="threshold (tau)"),
        Line2D([], [], color="0.6", ls=":", lw=0.8, label="log K (plateau)"),
        Line2D([], [], ls="none", marker="o", color="0.3", mec="black", label="tau crossed"),
    ]
    key += [
        Line2D(
            [],
            [],
            ls="none",
            **{"color": "0.3", "markeredgecolor": "0.3", **END_MARK[s]},
            label=s if s != "stopped" else "interrupted / failed",
        )
        for s in END_MARK
    ]
    fig.suptitle(f"preset {cfg.preset}: {cfg.outdir}", fontsize=9)
    fig.legend(
        handles=key,
        loc="outside lower center",
        ncol=min(len(key), 2 * ncols),
        fontsize=7,
        frameon=False,
    )
    return fig, drawn


def plot_curves(cfg: CoreConfig, path: str | Path, states: dict[str, str]) -> dict:
    """`draw` into `path` (.png or .pdf), replaced atomically (a viewer reloading it never
    sees half a file). Returns {experiment: curves drawn}."""
    fig, drawn = draw(cfg, states)
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    write_bytes_atomic(path, buf.getvalue())
    return drawn

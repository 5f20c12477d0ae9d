"""`python -m mbc.status --plot`: every run's curve so far, from what the jobs leave on disk
(mbc.planning.curves), on the shared smoke outdir (finished) and on a copy of its logs with one run
killed mid-training, one diverged and one not started."""

import json
import shutil
from pathlib import Path

import yaml

from mbc import config as mbc_config
from mbc.planning.curves import draw, read_curve, varied_keys
from mbc.status import main, status

ROOT = Path(__file__).resolve().parents[1]


def _cfg(outdir) -> mbc_config.Config:
    # the live smoke preset: the `smoke` fixture ran it (its outputs are drawn here)
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    return mbc_config.load(raw, {"preset": "smoke", "outdir": str(outdir)})


def _curves_per_panel(fig) -> dict[str, int]:
    """Experiment (the panel's title up to ':') -> lines drawn as a run's curve."""
    return {
        ax.get_title().split(":")[0]: sum(
            str(line.get_gid()).startswith("curve:") for line in ax.get_lines()
        )
        for ax in fig.axes
        if ax.get_visible() and ax.get_title()
    }


def _plot(cfg, stale_s=300.0):
    table = status(cfg, stale_s)
    return draw(cfg, dict(zip(table.run_id, table.state, strict=True)))


def test_curves_of_a_finished_smoke_outdir(smoke, tmp_path, capsys):
    cfg = _cfg(smoke)
    fig, drawn = _plot(cfg)
    runs = {e: len(set(cfg.run_ids(e))) for e in cfg.raw["experiments"]}
    assert _curves_per_panel(fig) == drawn == runs  # every run of every experiment
    # the E1 panel is coloured by K, E2's by D and K
    assert varied_keys([r.spec for r in cfg.experiment_runs("E1")]) == ["task.k"]
    assert set(varied_keys([r.spec for r in cfg.experiment_runs("E2")])) == {"d", "task.k"}
    png = tmp_path / "curves.png"
    main(["--preset", "smoke", "--config", f"outdir={smoke}", "--plot", str(png)])
    assert png.read_bytes()[:4] == b"\x89PNG" and f"curves: {png}" in capsys.readouterr().out


def test_curves_of_a_half_finished_outdir(smoke, tmp_path):
    """Logs only (no snapshots): one run killed mid-training (its log cut mid-line, no
    tables), one diverged, one not started; the others finished."""
    cfg = _cfg(tmp_path)
    e1 = cfg.run_ids("E1")
    killed, diverged, pending = e1[0], e1[1], cfg.run_ids("E5")[0]
    for rid in cfg.specs:
        if rid == pending:
            continue
        src, dst = smoke / "runs" / rid, tmp_path / "runs" / rid
        (dst / "state").mkdir(parents=True)
        shutil.copy(src / "state" / "log.jsonl", dst / "state" / "log.jsonl")
        if rid not in (killed, diverged):
            shutil.copy(src / "summary.json", dst / "summary.json")
    log = tmp_path / "runs" / killed / "state" / "log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:20])  # torn
    dlog = tmp_path / "runs" / diverged / "state" / "log.jsonl"
    rows = dlog.read_text().splitlines(keepends=True)
    at = json.loads(rows[5])["step"]
    dlog.write_text("".join(rows[:6]) + json.dumps({"event": "diverged", "step": at}) + "\n")
    cut = read_curve(log)
    assert (
        0 < len(cut.steps) < len(read_curve(smoke / "runs" / killed / "state" / "log.jsonl").steps)
    )
    assert read_curve(dlog).diverged == at

    fig, drawn = _plot(cfg, stale_s=0.0)  # every unfinished log is quiet: interrupted
    runs = {e: len(set(cfg.run_ids(e))) for e in cfg.raw["experiments"]}
    assert drawn == _curves_per_panel(fig) == {**runs, "E5": runs["E5"] - 1}
    e1_ax = next(ax for ax in fig.axes if ax.get_title().startswith("E1:"))
    markers = [line.get_marker() for line in e1_ax.get_lines()]
    assert "X" in markers and "s" in markers  # diverged; interrupted (the killed run)
    assert "1 interrupted" in e1_ax.get_title() and "1 diverged" in e1_ax.get_title()


def test_curves_of_an_empty_outdir(tmp_path):
    png = tmp_path / "empty.png"
    main(["--preset", "smoke", "--config", f"outdir={tmp_path / 'nothing'}", "--plot", str(png)])
    assert png.exists()
    fig, drawn = _plot(_cfg(tmp_path / "nothing"))
    assert set(drawn.values()) == {0} and set(_curves_per_panel(fig).values()) == {0}


def test_every_setting_a_legend_shows_has_its_words_in_config_labels(tmp_path):
    """Each run setting that varies within an experiment, in any preset, is named by config
    `labels` (a legend never shows a raw field name such as unique_first_chars=False)."""
    from mbc.planning.curves import _label

    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    labels = raw["labels"]
    for preset in ("smoke", "quick", "paper_cpu", "paper"):
        cfg = mbc_config.load(raw, {"preset": preset, "outdir": str(tmp_path)})
        for exp in dict.fromkeys(r.experiment for r in cfg.runs):
            keys = varied_keys([r.spec for r in cfg.experiment_runs(exp)])
            assert set(keys) <= set(labels), (preset, exp, set(keys) - set(labels))
    assert _label("task.unique_first_chars", False, labels) == "distinct first characters: no"
    assert _label("task.k", 20, labels) == "K=20" and _label("model.init_std", None, labels) == (
        "init std=default"
    )

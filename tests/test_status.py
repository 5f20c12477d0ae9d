import json
import os
import time
from pathlib import Path

import yaml

from mbc.core import config as mbc_config
from mbc.status import main, status
from mbc.training.data import build_dataset
from mbc.training.train import train_run

ROOT = Path(__file__).resolve().parents[1]


def test_status_reads_each_state_from_disk(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg = mbc_config.load(raw, {"preset": "smoke", "outdir": str(tmp_path), "only": ["E1"]})
    (a, sa), (b, sb) = list(cfg.specs.items())[:2]
    runs = tmp_path / "runs"
    # a: trained and summarised
    train_run(sa, build_dataset(sa.task, sa.seed), runs / a, "cpu", say=lambda s: None)
    (runs / a / "summary.json").write_text(json.dumps({"tau": 30, "censored": False, "steps": 100}))
    # b: stopped mid-run, quiet for longer than --stale-s, its job log ends in a traceback
    train_run(sb, build_dataset(sb.task, sb.seed), runs / b, "cpu", say=lambda s: None,
              stop_after=40)  # fmt: skip
    old = time.time() - 3600
    os.utime(runs / b / "state" / "log.jsonl", (old, old))
    t = status(cfg, stale_s=60).set_index("run_id")
    assert t.loc[a, "state"] == "done" and t.loc[a, "tau"] == 30
    assert t.loc[b, "state"] == "interrupted" and t.loc[b, "step"] <= 40
    assert 0 < t.loc[b, "lcand_over_log_k"] < 3
    (tmp_path / "logs" / "train").mkdir(parents=True)
    (tmp_path / "logs" / "train" / f"{b}.log").write_text("Traceback (most recent call last):\n")
    assert status(cfg, stale_s=60).set_index("run_id").loc[b, "state"] == "failed"
    assert status(cfg, stale_s=1e9).set_index("run_id").loc[b, "state"] == "running"
    # a summarised run whose metrics.csv is gone is not done (it showed "done")
    (runs / a / "metrics.csv").unlink()
    assert status(cfg, stale_s=60).set_index("run_id").loc[a, "state"] == "incomplete"


def test_status_cli_names_a_bad_preset_in_one_line(capsys):
    try:
        main(["--preset", "nope", "--config", str(ROOT / "config.yaml")])
    except SystemExit as exc:
        msg = str(exc)
    assert msg.startswith("mbc.status: config key 'preset' = 'nope'") and "\n" not in msg

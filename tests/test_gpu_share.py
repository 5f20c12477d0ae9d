"""The workflow's training jobs declare their estimated device memory (`gpu_mem_mb`), so
`--resources gpu_mem_mb=<the GPU's MiB>` runs packs side by side while they fit."""

import math
import re
from pathlib import Path

from helpers import snakemake

from mbc import config as mbc_config
from mbc.core.packing import configured_packs, pack_priority
from mbc.planning.cost import pack_memory_gb

CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"


def test_each_pack_job_declares_its_estimated_memory_and_priority(tmp_path):
    res = snakemake(
        "-n", "all", "--config", "preset=smoke", f"outdir={tmp_path}", "pack={enabled: true}"
    )
    said = res.stdout + res.stderr
    declared = dict(re.findall(r"train_pack/([^\s/]+)\.log\n.*?gpu_mem_mb=(\d+)", said, flags=re.S))
    priority = dict(re.findall(r"train_pack/([^\s/]+)\.log\n.*?priority: (\d+)", said, flags=re.S))
    cfg = mbc_config.load(
        mbc_config.read_yaml(CONFIG), {"preset": "smoke", "pack": {"enabled": True}}
    )
    packs = configured_packs(cfg.specs, cfg.raw["pack"])
    assert set(declared) == set(packs)
    for pid, members in packs.items():
        want = math.ceil(1024 * pack_memory_gb([cfg.specs[r] for r in members]))
        assert int(declared[pid]) == want, pid
        # the pack with the most budgeted run-steps starts first (`pack_priority`)
        assert int(priority[pid]) == pack_priority([cfg.specs[r] for r in members]), pid

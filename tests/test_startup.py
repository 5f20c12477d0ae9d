"""What a `snakemake` start-up does while the Snakefile is parsed (plan, report), and what
waits for `onstart`, which Snakemake runs only when it runs jobs (timing a training step)."""

from helpers import REPO, smoke_args, snakemake

from mbc import config as mbc_config
from mbc.core.layout import Layout


def test_a_dry_run_times_nothing_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the machine's rate cache
    out = tmp_path / "out"
    res = snakemake("-n", "all", *smoke_args(out))
    said = res.stdout + res.stderr
    assert "mbc: preset smoke" in said and "distinct runs" in said, said[-2000:]
    assert "steps/s measured" not in said and "expected training wall time" not in said
    assert not (tmp_path / "cache" / "mbc").exists() and not out.exists()


def test_running_jobs_times_the_common_shape_once_at_onstart(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    cfg = mbc_config.load(
        mbc_config.read_yaml(REPO / "config.yaml"), {"preset": "smoke", "outdir": str(out)}
    )
    dataset = Layout(str(out)).dataset(next(iter(cfg.specs.values())).dataset_id)
    res = snakemake(dataset, *smoke_args(out))  # one quick job: the start-up is what we read
    said = res.stderr
    assert said.count("expected training wall time") == 1, said[-3000:]
    assert said.count("distinct runs") == 1  # the untimed lines are not printed again
    assert (tmp_path / "cache" / "mbc" / "steps_per_s.json").exists()


def test_a_profiles_dry_run_is_a_dry_run(tmp_path, monkeypatch):
    """`dryrun: true` in a profile: Snakemake's own setting says so (the command line does
    not), so the start-up repairs nothing, holds nothing and creates no outdir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "dry").mkdir()
    (tmp_path / "dry" / "config.yaml").write_text("dryrun: true\n")
    out = tmp_path / "out"
    res = snakemake("--profile", str(tmp_path / "dry"), "all", *smoke_args(out))
    said = res.stdout + res.stderr
    assert "mbc: preset smoke" in said and "Job stats" in said, said[-2000:]
    assert not out.exists()

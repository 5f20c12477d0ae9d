"""The run store (mbc.stored_runs, its command mbc.run_store): finished runs stored, restored into an empty outdir with no
training job and byte-equal tables, and every entry that does not match its binding refused
in one line and trained instead. The deadline's choice (mbc.planning.deadline)."""

import gzip
import json
import shutil

import pytest
from helpers import REPO, smoke_args, snakemake

from mbc import config as mbc_config
from mbc import stored_runs as run_store
from mbc.core.config_loader import ConfigError
from mbc.core.layout import Layout
from mbc.planning.deadline import choose, parse_deadline

TABLES = (
    "tau",
    "metrics",
    "hessian",
    "collective",
    "fits",
    "statistics",
    "scorecard",
    "hypotheses",
)


def _cfg(out, store, **extra):
    raw = mbc_config.read_yaml(REPO / "config.yaml")
    return mbc_config.load(
        raw, {"preset": "smoke", "outdir": str(out), "store": str(store), **extra}
    )


@pytest.fixture(scope="module")
def stored(smoke, tmp_path_factory):
    """Every run of the suite's smoke outdir in a store of its own."""
    store = tmp_path_factory.mktemp("store") / "runs"
    added, left = run_store.add(_cfg(smoke, store), store)
    assert left == {} and len(added) == len(_cfg(smoke, store).specs)
    return store


def test_an_entry_binds_the_run_to_what_built_it(smoke, stored):
    cfg = _cfg(smoke, stored)
    hessian_run = cfg.diagnosed_runs("hessian")[0]
    entry = run_store.read_entry(stored / hessian_run)
    assert entry["spec_hash"] == hessian_run.rsplit("-", 1)[1]
    assert entry["spec"] == cfg.specs[hessian_run].to_dict()
    assert set(entry["config"]) >= {"summary", "hessian"}
    assert entry["trained_by"] and entry["trained_by"][0]["commit"]
    assert entry["snapshots"]  # their sha256 only: the files stay where the run trained
    assert not any(
        name.endswith(".pt") for name in (p.name for p in (stored / hessian_run).iterdir())
    )
    for rel, f in entry["files"].items():
        assert run_store.stored_bytes(stored / hessian_run, f) == (smoke / rel).read_bytes()
    assert run_store.check(cfg, stored) == []


def test_a_fresh_outdir_is_restored_without_training_and_its_tables_are_equal(
    smoke, stored, tmp_path
):
    out = tmp_path / "results"
    res = snakemake("all", *smoke_args(out), f"store={stored}", "--allowed-rules", *_NO_RUN_RULES)
    # Snakemake refuses a job of a rule not allowed: none trained, none diagnosed
    console = res.stdout + res.stderr
    n = len(_cfg(out, stored).specs)
    assert f"{n} came from it into the outdir, nothing retrained" in console
    assert f"{n} trained ({n} from the run store), 0 to train" in console
    for t in TABLES:
        assert (out / f"{t}.csv").read_bytes() == (smoke / f"{t}.csv").read_bytes(), t
    assert (out / "tex" / "numbers.tex").read_bytes() == (
        smoke / "tex" / "numbers.tex"
    ).read_bytes()
    # a second invocation finds everything in place: nothing restored again, nothing to do
    again = snakemake("all", *smoke_args(out), f"store={stored}")
    assert "Nothing to be done" in again.stdout + again.stderr


# every rule but those that train or read snapshots
_NO_RUN_RULES = [
    "dataset", "summarize_run", "tau_table", "aggregate", "plateau_sensitivity", "fits",
    "routing_heads", "statistics", "hypotheses", "scorecard",
    "robustness", "figure", "tex", "paper", "all",
]  # fmt: skip


def _one_run(cfg):
    return cfg.diagnosed_runs("hessian")[0]


def _copy_store(stored, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(stored, store)
    return store


def test_an_altered_stored_file_is_refused_in_one_line_and_the_outdir_is_untouched(
    smoke, stored, tmp_path
):
    store = _copy_store(stored, tmp_path)
    out = tmp_path / "out"
    cfg = _cfg(out, store)
    run = _one_run(cfg)
    entry = run_store.read_entry(store / run)
    name = entry["files"][f"runs/{run}/metrics.csv"]["stored"]
    data = gzip.decompress((store / run / name).read_bytes()).replace(b"0.", b"1.", 1)
    (store / run / name).write_bytes(gzip.compress(data))
    result = run_store.restore(cfg)
    assert run in result.refused and run not in result.restored
    assert "differs from the sha256 its entry records" in result.refused[run]
    assert not (out / "runs" / run).exists()
    assert any(f"{run}: refused" in line for line in result.lines())
    assert run_store.check(cfg, store)


def test_a_changed_config_section_refuses_the_entries_that_read_it(smoke, stored, tmp_path):
    out = tmp_path / "out"
    raw = mbc_config.read_yaml(REPO / "config.yaml")
    raw["presets"]["smoke"]["diagnostics"]["hessian"]["n_iter"] += 1
    cfg = mbc_config.load(raw, {"preset": "smoke", "outdir": str(out), "store": str(stored)})
    result = run_store.restore(cfg, dry_run=True)
    hessian_runs = set(cfg.diagnosed_runs("hessian"))
    assert set(result.refused) == hessian_runs
    assert all("diagnostics.hessian changed" in w for w in result.refused.values())
    assert len(result.restored) == len(cfg.specs) - len(hessian_runs)
    assert not out.exists()  # a dry run writes nothing


def test_a_partial_run_is_moved_aside_and_replaced_by_its_stored_whole(smoke, stored, tmp_path):
    out = tmp_path / "out"
    cfg = _cfg(out, stored)
    run = _one_run(cfg)
    partial = Layout(str(out)).run(run)
    partial.log.parent.mkdir(parents=True)
    partial.log.write_text(json.dumps({"event": "start", "step": 0}) + "\n")
    result = run_store.restore(cfg)
    assert run in result.restored and not result.refused
    assert run_store.in_place(Layout(str(out)), run_store.read_entry(stored / run))
    aside = list((out / "superseded").glob(f"*/runs/{run}/state/log.jsonl"))
    assert len(aside) == 1 and aside[0].read_text().startswith('{"event": "start"')
    assert partial.stored.is_file()


def test_a_run_not_finished_is_not_stored(smoke, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(smoke / "runs", out / "runs")
    cfg = _cfg(out, tmp_path / "store")
    run = next(iter(cfg.specs))
    log = Layout(str(out)).run(run).log
    rows = [r for r in log.read_text().splitlines() if '"event": "done"' not in r]
    log.write_text("\n".join(rows) + "\n")
    assert run_store.not_ready(cfg, Layout(str(out)), run) == "not finished"


@pytest.mark.parametrize(
    "text, seconds",
    [("2h", 7200), ("2h30m", 9000), ("90m", 5400), ("1.5h", 5400), ("5400", 5400), ("", None)],
)
def test_a_deadline_reads_as_a_duration(text, seconds):
    assert parse_deadline(text) == seconds


@pytest.mark.parametrize("text", ["2 hours", "-1h", "0", "h"])
def test_a_bad_deadline_names_the_key(text):
    with pytest.raises(ConfigError, match="deadline"):
        parse_deadline(text)


def test_the_deadline_starts_the_shortest_runs_that_end_in_time():
    seconds = {"a": 50.0, "b": 10.0, "c": 30.0, "d": 100.0, "e": 45.0}
    # two jobs, 60 s: b (0-10) and c (0-30) start first, then e after b (10-55); a would end
    # at 30 + 50 = 80, d at 100: neither starts
    assert choose(seconds, jobs=2, budget_s=60) == ["b", "c", "e"]
    assert choose(seconds, jobs=1, budget_s=5) == []
    assert choose(seconds, jobs=5, budget_s=100) == ["b", "c", "e", "a", "d"]


def test_the_deadline_scales_the_model_by_the_runs_finished_here(monkeypatch):
    """Its steps/s is 5 bare training steps: a loaded machine, or evaluation dearer than
    modelled, took 2.1x the model's time in the first paper_cpu period. The deadline scales the
    model by the median wall / modelled time of runs finished here in one session on this CPU."""
    from mbc.core.provenance import cpu_model
    from mbc.planning import banner, deadline

    cfg = _cfg(REPO / "results" / "none", "")
    ids = list(cfg.specs)[:5]

    def log(cpu, wall, sessions=1):
        start = {"event": "start", "step": 0, "cpu": cpu}
        return [*[start] * sessions, {"step": 100, "wall_s": wall}, {"event": "done", "step": 100}]

    logs = {r: [] for r in cfg.specs}
    logs |= {ids[0]: log(cpu_model(), 200.0), ids[1]: log(cpu_model(), 300.0)}
    logs |= {ids[2]: log(cpu_model(), 400.0), ids[3]: log("another CPU", 9000.0)}
    logs |= {ids[4]: log(cpu_model(), 9000.0, sessions=2)}  # resumed: its wall is one session's
    monkeypatch.setattr(
        banner, "seconds_per_run", lambda cfg, todo, *a, **k: ({r: 100.0 for r in todo}, 8.8)
    )
    assert deadline.observed_factor(cfg, logs, "cpu") == (3.0, 3)
    assert deadline.observed_factor(cfg, {r: [] for r in cfg.specs}, "cpu") is None

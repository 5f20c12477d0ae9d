import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from helpers import fixture_config

from mbc.config import ConfigError, load, schema
from mbc.core.config_loader import resolve

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def raw():
    # the live config on purpose: these tests check config.yaml itself and its presets
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def with_(raw, path, value, preset="smoke"):
    cfg = copy.deepcopy(raw)
    node = cfg["presets"][preset] if preset else cfg
    *parents, last = path
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return cfg


def test_presets_resolve_and_expand(raw):
    paper = load(raw)
    smoke = load(raw, {"preset": "smoke"})
    quick = load(raw, {"preset": "quick"})
    assert paper.preset == "paper" and paper.outdir == "results"
    assert smoke.outdir == "results/smoke" and quick.outdir == "results/quick"
    assert len(paper.specs) > len(quick.specs) > len(smoke.specs) > 0
    e1 = {r.spec.task.k for r in paper.experiment_runs("E1")}
    assert e1 == {3, 5, 7, 10, 13, 15, 17, 20, 25, 30, 36}
    assert all(r.spec.task.n_groups == 1000 for r in paper.experiment_runs("E1"))
    assert {(r.spec.task.d, r.spec.task.k) for r in paper.experiment_runs("E2")} >= {
        (10000, 5),
        (20000, 20),
    }
    assert all(len(set(r.spec.seed for r in paper.experiment_runs(e))) >= 3 for e in ("E1", "E2"))


def test_command_line_overrides_win_over_preset(raw):
    cfg = load(raw, {"preset": "smoke", "outdir": "/tmp/elsewhere"})
    assert cfg.outdir == "/tmp/elsewhere"


def test_run_ids_are_content_derived_and_shared_across_experiments(raw):
    a, b = load(raw, {"preset": "smoke"}), load(raw, {"preset": "smoke"})
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]
    # E5's z_length=2 run is the same spec as E1's K=3 run: one training, two memberships
    assert set(a.run_ids("E5")) & set(a.run_ids("E1"))


BAD = [
    # (path under presets.smoke or top level, value, key named in the message)
    (("defaults", "task", "kk"), 3, "defaults.task"),  # unknown key
    (("bogus_key",), 1, "bogus_key"),  # unknown top-level key, named itself
    # the key is named where the user wrote it: here, in the smoke preset's entries
    (("experiments", "E1", "grid", "task.k"), [37], "presets.smoke.experiments.E1.grid.task.k"),
    (("experiments", "E1", "grid", "task.k"), [1], "presets.smoke.experiments.E1.grid.task.k"),
    (
        ("experiments", "E1", "set"),
        {"task.n_groups": 200000},
        "presets.smoke.experiments.E1.set.task.n_groups",
    ),  # string space
    (("defaults", "train", "lr"), -1e-3, "'presets.smoke.defaults.train.lr'"),  # negative lr
    (("defaults", "train", "lr"), 0.0, "'presets.smoke.defaults.train.lr'"),  # zero lr
    (("defaults", "eval", "threshold"), 1.5, "'presets.smoke.defaults.eval.threshold'"),
    (("defaults", "eval", "threshold"), 0.0, "'presets.smoke.defaults.eval.threshold'"),
    (("seeds",), [], "'presets.smoke.seeds'"),  # empty seed list
    (("experiments", "E1", "grid", "task.k"), [3, 3], "experiments.E1"),  # duplicate run ids
    (("defaults", "train", "batch_size"), 10_000, "'presets.smoke.defaults.train.batch_size'"),
    (("experiments", "E1", "grid", "task.z_length"), [7], "task.z_length"),  # z_length > 4
    (("experiments", "E1", "grid", "task.label_noise"), [1.0], "task.label_noise"),
    (
        ("experiments", "E1", "grid", "task.kk"),
        [3],
        "experiments.E1.grid.task.kk",
    ),  # unknown grid key
    (("experiments", "E1", "grid", "task.k"), [], "experiments.E1.grid.task.k"),  # empty grid
    (("defaults", "model", "d_model"), 33, "'presets.smoke.defaults.model.d_model'"),
    # e_B's encoding is the linear baseline's: on a transformer it would only move run ids
    (("defaults", "model", "linear_input"), "identity", "defaults.model.linear_input"),
    (("defaults", "model", "linear_input"), "bytes", "defaults.model.linear_input"),
    (("device",), "tpu", "device"),  # unknown device
    (("defaults", "train", "max_steps"), 0, "defaults.train.max_steps"),
    (
        ("experiments", "E11", "variants"),
        [{"task.sharing": "supergroup", "task.n_supergroups": 99}],
        "task.n_supergroups",
    ),
    (("diagnostics", "collective", "source"), "E99", "diagnostics.collective.source"),
    (
        ("experiments", "E1", "grid", "task.sharing"),
        ["everyone"],
        "'presets.smoke.experiments.E1.grid.task.sharing'",
    ),
    (("defaults", "train", "engine"), "turbo", "defaults.train.engine"),  # unknown engine
    (("plateau_sensitivity", "experiments"), ["E99"], "plateau_sensitivity.experiments"),
    (("threshold_sensitivity", "experiments"), ["E98"], "threshold_sensitivity.experiments"),
    (("plateau_sensitivity", "band"), [1.1, 0.9], "plateau_sensitivity.band"),  # reversed
    (("plateau_sensitivity", "delta_z_onsets"), [-0.1], "plateau_sensitivity.delta_z_onsets"),
]


@pytest.mark.parametrize("path,value,key", BAD, ids=[".".join(p[0]) + f"={p[1]!r}" for p in BAD])
def test_bad_config_names_key_and_value(raw, path, value, key):
    cfg = with_(raw, path, value, preset=None if path[0] in ("bogus_key", "device") else "smoke")
    with pytest.raises(ConfigError) as exc:
        load(cfg, {"preset": "smoke"})
    msg = str(exc.value)
    assert key in msg, msg
    shown = (
        value
        if isinstance(value, list) and not value
        else (value[0] if isinstance(value, list) else value)
    )
    if isinstance(shown, dict):
        shown = list(shown.values())[-1]
    said = msg.split("' = ", 1)[1]  # what follows the key: its value, as written there
    if "duplicate run id" in said:  # named by the run id written twice (K = 3)
        assert said.startswith("'bz_to_a-transformer-K3-"), msg
    else:
        assert said.startswith((repr(shown), f"[{shown!r}")), msg


@pytest.mark.parametrize("preset", [None, "smoke"])
def test_unknown_experiment_of_a_statistic_is_refused_naming_the_key(raw, preset):
    """Every experiment a statistic reads (statistics.<name>.experiments) must be declared;
    one line names the key where it was written."""
    where = "" if preset is None else f"presets.{preset}."
    named = [n for n, st in raw["statistics"].items() if "experiments" in st]
    assert {"lr_tau_ratio", "direction_ratio", "lead_fraction_mean"} <= set(named)
    for name in named:
        path = ("statistics", name, "experiments")
        with pytest.raises(ConfigError) as exc:
            load(with_(raw, path, ["E1", "E99"], preset=preset), {"preset": "smoke"})
        msg = str(exc.value)
        assert msg == f"config key '{where}{'.'.join(path)}' = 'E99': unknown experiment", msg


def test_a_statistic_takes_its_kinds_parameters_only(raw):
    """The statistics schema comes from the registry of kinds: a parameter of another kind,
    an unknown kind and a missing required parameter are refused, naming the key."""
    for name, change, match in (
        ("lr_tau_ratio", {"column": "tau"}, r"statistics.lr_tau_ratio.column' .*unknown key"),
        ("n_runs", {"kind": "median"}, r"statistics.n_runs' .*'column' is a required"),
        ("n_runs", {"kind": "average"}, r"statistics.n_runs.kind' = 'average'.* not one of"),
    ):
        cfg = copy.deepcopy(raw)
        cfg["statistics"][name].update(change)
        with pytest.raises(ConfigError, match=match):
            load(cfg)


def test_unknown_preset(raw):
    with pytest.raises(ConfigError, match="preset.*'tiny'.*unknown preset"):
        resolve(raw, {"preset": "tiny"})


def test_unknown_experiment_in_only(raw):
    with pytest.raises(ConfigError, match="'only' = 'E42'"):
        load(raw, {"preset": "smoke", "only": ["E42"]})


def test_bad_sharing_enum_is_caught_for_typo_in_task(raw):
    with pytest.raises(ConfigError, match="sharing"):
        load(with_(raw, ("defaults", "task", "sharing"), "everyone"), {"preset": "smoke"})


def test_engine_is_an_implementation_choice_outside_the_run_id(raw):
    """train.engine / train.compile change how a run is computed, not what: run ids (and
    the Snakemake params of default specs) are exactly what they were before the keys."""
    import dataclasses

    from mbc.core.spec import RunSpec

    default = RunSpec()
    # Pinned so that an id never moves by accident. It last moved, on purpose, when the
    # author's initialisation (model.init), the training regime (train.schedule, ...) and
    # eval.dense_every became part of what a run computes (133cca04 -> 9f959737), then when
    # the dataclass defaults took config.yaml's paper values (-> 4eb60678), then when the
    # evaluations moved onto the author's 50-step grid (eval.on_grid, -> d5c29b45).
    assert default.run_id == "bz_to_a-transformer-K10-G1000-z2-shared-p0-lr0.001-B128-s0-d5c29b45"
    assert "engine" not in default.to_dict()["train"]
    assert "compile" not in default.to_dict()["train"]
    plain = dataclasses.replace(
        default, train=dataclasses.replace(default.train, engine="plain", compile=True)
    )
    assert plain.run_id == default.run_id
    assert plain.to_dict()["train"]["engine"] == "plain"
    assert RunSpec.from_dict(plain.to_dict()) == plain
    assert RunSpec.from_dict(default.to_dict()) == default

    fast = load(raw, {"preset": "smoke"})
    slow = load(with_(raw, ("defaults", "train", "engine"), "plain"), {"preset": "smoke"})
    assert [r.run_id for r in slow.runs] == [r.run_id for r in fast.runs]
    assert {r.spec.train.engine for r in slow.runs} == {"plain"}
    assert {r.spec.train.engine for r in fast.runs} == {"fast"}


def test_shared_run_with_conflicting_engines_is_rejected(raw):
    # E5's z_length=2 run is E1's K=3 run; asking E1 alone for the plain engine conflicts
    cfg = with_(raw, ("experiments", "E1", "set", "train.engine"), "plain")
    with pytest.raises(ConfigError, match="train.engine"):
        load(cfg, {"preset": "smoke"})
    # both engines in one grid are one run twice
    cfg = with_(raw, ("experiments", "E1", "grid", "train.engine"), ["fast", "plain"])
    with pytest.raises(ConfigError, match="duplicate run id"):
        load(cfg, {"preset": "smoke"})


def test_dataclass_defaults_are_config_yaml_defaults(raw):
    """One source for defaults: a RunSpec built without config is the paper setting."""
    import dataclasses

    from mbc.core.config_loader import SECTIONS

    assert set(SECTIONS) == set(raw["defaults"]) == {"task", "model", "train", "eval"}
    for name, cls in SECTIONS.items():
        assert dataclasses.asdict(cls()) == raw["defaults"][name], name


def test_run_fields_are_declared_once_in_the_dataclasses():
    """The schema's run sections are generated from the dataclasses (their fields, types
    and `run_field` constraints); the schema file declares none of them a second time."""
    from mbc.core.config_loader import SECTIONS
    from mbc.core.spec import section_schema

    text = (ROOT / "src" / "mbc" / "core" / "config.schema.yaml").read_text()
    assert set(SECTIONS) & set(yaml.safe_load(text)["definitions"]) == set()
    for name, cls in SECTIONS.items():
        assert schema()["definitions"][name] == section_schema(cls), name
    props = schema()["definitions"]["train"]["properties"]
    assert props["batch_size"] == {"type": "integer", "minimum": 1}  # annotation + constraint
    assert props["compile"] == {"enum": [True, False, "auto"]}  # an enum stands for the type
    assert schema()["definitions"]["model"]["properties"]["init_std"]["type"] == ["number", "null"]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        (("task", "z_length"), 5, "5 is greater than the maximum of 4"),
        (("model", "n_layers"), 2.0, "must be an integer"),
        (("train", "schedule"), "cosine", "is not one of"),
        (("eval", "resume_every"), 0, "0 is less than the minimum of 1"),
    ],
)
def test_a_run_field_constraint_from_its_declaration_names_the_key(raw, key, value, why):
    cfg = copy.deepcopy(raw)
    cfg["defaults"][key[0]][key[1]] = value
    with pytest.raises(ConfigError, match=f"^config key 'defaults.{key[0]}.{key[1]}'") as err:
        load(cfg)
    assert why in str(err.value)


def test_bad_default_in_the_base_config_is_named_there(raw):
    cfg = copy.deepcopy(raw)
    cfg["defaults"]["train"]["lr"] = -1.0
    with pytest.raises(ConfigError, match=r"^config key 'defaults.train.lr' = -1.0"):
        load(cfg)


def test_outdir_that_is_a_file_and_paper_pdf_following_outdir(raw, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ConfigError, match="'outdir'.*not a directory"):
        load(raw, {"preset": "smoke", "outdir": str(f)})
    moved = resolve(raw, {"preset": "quick", "outdir": str(tmp_path / "q2")})
    assert moved["paper_pdf"] == f"{tmp_path}/q2/paper/main.pdf"
    assert resolve(raw, {"preset": "quick"})["paper_pdf"] == "results/quick/paper/main.pdf"


def test_every_fit_and_tested_statistic_has_a_readable_label(raw):
    """The paper's tables print labels, never internal keys such as fit:tau_vs_sharing."""
    from mbc.paper.report import readable

    labels = raw["labels"]
    names = [f"fit:{f['name']}" for f in raw["fits"]] + [
        f"fit:{d['name']}" for d in raw.get("fit_differences", [])
    ]
    for h in raw["hypotheses"].values():
        names += [t[k] for t in h["tests"] for k in ("statistic", "ours") if k in t]
    names += [r["statistic"] for r in raw["scorecard"] if r["paper_reference"]["traced"] == "ours"]
    for name in names:
        shown = readable(name.replace("*", "d2000"), labels)
        assert shown != name.replace("*", "d2000"), name
        assert shown.isascii() and ":" not in shown.split(": ", 1)[-1], shown
    assert readable("fit:tau_vs_k_at_d2000", labels) == "tau-vs-K exponent at D = 2000"
    assert readable("fit_r2:tau_vs_d", labels).startswith("R^2 of the fit: ")
    assert readable("no_label_here", labels) == "no_label_here"


@pytest.mark.parametrize(
    "text, said",
    [
        ("preset: smoke\nfoo: [1, 2\n", "my.yaml, line 3, column 1: not valid YAML"),
        ("a: 1\n\tb: 2\n", "my.yaml, line 2, column 1: not valid YAML"),
        ("- smoke\n", "my.yaml: must be a mapping of config keys, not a list"),
        ("defaults:\n  train:\n    lr: -1\n", "config key 'defaults.train.lr' = -1"),
        ("preset: quik\n", "config key 'preset' = 'quik': unknown preset"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_or_key(tmp_path, capsys, text, said):
    """`python -m mbc.config FILE`: what Snakemake's own --configfile reading cannot say."""
    from mbc.config.__main__ import main

    (tmp_path / "my.yaml").write_text(text)
    assert main([str(tmp_path / "my.yaml"), "--base", str(ROOT / "config.yaml")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("mbc: ") and said in out and out.count("\n") == 1, out


def test_config_files_merge_in_order_over_the_base(tmp_path, capsys):
    from mbc.config.__main__ import main

    (tmp_path / "a.yaml").write_text("preset: quick\noutdir: /tmp/a\n")
    (tmp_path / "b.yaml").write_text("outdir: /tmp/b\n")
    base = ["--base", str(ROOT / "config.yaml")]
    assert main([str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), *base]) == 0
    assert "preset quick" in (out := capsys.readouterr().out) and "outdir /tmp/b" in out
    assert main([str(tmp_path / "missing.yaml"), *base]) == 1
    assert "missing.yaml: cannot read (No such file or directory)" in capsys.readouterr().out


def test_a_value_given_with_config_is_named_as_given_there(raw):
    """`--config` values (Snakemake's overwrite_config, passed as overrides) are named as
    the command line wrote them, not as the preset's entry they override."""
    with pytest.raises(ConfigError) as exc:
        load(raw, {"preset": "smoke", "defaults": {"train": {"lr": -1.0}}})
    assert "config key '--config defaults.train.lr' = -1.0" in str(exc.value), str(exc.value)


def test_a_batch_larger_than_the_dataset_names_where_n_groups_was_written(raw):
    """n_groups: 1 makes D smaller than the batch: the line names n_groups' entry too (it
    blamed batch_size alone)."""
    with pytest.raises(ConfigError) as exc:
        load(raw, {"preset": "smoke", "defaults": {"task": {"n_groups": 1}}})
    msg = str(exc.value)
    assert "batch_size" in msg and "n_groups from '--config defaults.task.n_groups'" in msg, msg


def test_presets_override_a_declared_statistics_parameters(raw):
    """A preset overrides an entry's keys (deep merge); the rest of the entry is the base's."""
    paper, smoke = (load(raw, {"preset": p}).raw["statistics"] for p in ("paper", "smoke"))
    assert paper["batch_steps_ratio"]["where"] == {"k": 20}
    assert (smoke["batch_steps_ratio"]["where"], smoke["batch_steps_ratio"]["pair"]) == (
        {"k": 3},
        [8, 16],
    )
    assert smoke["lr_duration_ratio"]["where"] == {"lr": [3.0e-3, 1.0e-3]}
    assert (
        smoke["lr_duration_ratio"]["y"] == paper["lr_duration_ratio"]["y"] == "transition_duration"
    )
    assert list(smoke) == list(paper)  # statistics.csv's order


def test_the_fixture_config_passes_the_config_schema():
    """tests/fixtures/analysis.yaml holds entries the workflow would accept: its sections
    pass the schema config.yaml's do (only the top-level keys it leaves out are missing)."""
    validator = jsonschema.Draft202012Validator(schema())
    errors = [e for e in validator.iter_errors(fixture_config()) if e.absolute_path]
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


FIGURE_ERRORS = [
    # (path under presets.smoke, value, the whole one-line message)
    (
        ("figures", "tau_vs_dd"),
        {"experiments": {"runs": ["E1"]}},
        "config key 'figures.tau_vs_dd' = {'experiments': {'runs': ['E1']}}: unknown key",
    ),
    (
        ("figures", "noise", "experiments", "lr"),
        ["E6", "E99"],
        "config key 'presets.smoke.figures.noise.experiments.lr' = 'E99': unknown experiment",
    ),
    (
        ("figures", "noise", "fits", "lr"),
        "tau_vs_lrr",
        "config key 'presets.smoke.figures.noise.fits.lr' = 'tau_vs_lrr': no fit of that name",
    ),
    (
        ("figures", "appendix_sharing", "statistics", "author"),
        "sharing_beta",
        "config key 'presets.smoke.figures.appendix_sharing.statistics.author' = "
        "'sharing_beta': no statistic of that name",
    ),
    (
        ("figures", "noise", "experiments", "learning_rate"),
        ["E6"],
        "config key 'figures.noise.experiments.learning_rate' = ['E6']: unknown key",
    ),
    (  # the inset draws one line per D: a fit without `by` has no `_at_d` rows
        ("figures", "tau_vs_d", "fits", "inset"),
        "tau_vs_d",
        "config key 'presets.smoke.figures.tau_vs_d.fits.inset' = 'tau_vs_d': this role "
        "draws a fit with `by: d`",
    ),
    (  # a by-K fit's rows are named tau_vs_batch_steps_at_k20: no row is the lr line's
        ("figures", "noise", "fits", "lr"),
        "tau_vs_batch_steps",
        "config key 'presets.smoke.figures.noise.fits.lr' = 'tau_vs_batch_steps': this role "
        "draws one line: a fit without `by` (it has `by: k`)",
    ),
    (
        ("figures", "noise", "fits", "batch_steps"),
        "tau_vs_k",
        "config key 'presets.smoke.figures.noise.fits.batch_steps' = 'tau_vs_k': this role "
        "draws a fit with `by: k` (it has `by: d`)",
    ),
    (
        ("figures", "routing", "experiments", "onsets"),
        [],
        "config key 'figures.routing.experiments.onsets' = []: [] should be non-empty",
    ),
]


@pytest.mark.parametrize(
    "path,value,said", FIGURE_ERRORS, ids=[".".join(p) for p, _, _ in FIGURE_ERRORS]
)
def test_a_bad_figures_entry_is_one_line_naming_the_key(raw, path, value, said):
    """config `figures`: a figure name, role, experiment or fit the config does not know is
    refused at load, in one line naming the key (the schema knows each figure's roles)."""
    with pytest.raises(ConfigError) as exc:
        load(with_(raw, path, value), {"preset": "smoke"})
    assert str(exc.value).startswith(said), str(exc.value)


def test_every_figure_role_is_required(raw):
    cfg = copy.deepcopy(raw)
    del cfg["figures"]["init_scale"]["fits"]["sweep"]
    with pytest.raises(ConfigError, match=r"'figures.init_scale.fits' .*'sweep' is a required"):
        load(cfg)
    del cfg["figures"]["init_scale"]
    with pytest.raises(ConfigError, match=r"'figures' .*'init_scale' is a required"):
        load(cfg)


def test_figures_entries_are_typed_and_a_figure_without_roles_draws_its_tables(raw):
    figs = load(raw, {"preset": "smoke"}).figures
    assert figs["tau_vs_d"].experiments_of("d_fixed") == ["E2"]
    assert figs["noise"].fit_of("batch_steps") == "tau_vs_batch_steps"
    assert figs["collective"].experiments == figs["collective"].fits == ()
    with pytest.raises(KeyError, match="no experiments role 'sweep'"):
        figs["tau_vs_d"].experiments_of("sweep")

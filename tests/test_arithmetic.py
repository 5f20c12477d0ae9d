"""`auto` arithmetic (mbc.core.arithmetic, on what mbc.machine.probe reads): chosen by the hardware within the user's limits,
stated, and the same in every job. Every test passes on any CPU: the decision is tested on
planted flags and kernels, and on this machine under an AVX2-only limit and under its own
capability (whatever that is)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbc import config as mbc_config
from mbc.core import arithmetic as ar
from mbc.machine import probe as machine
from mbc.planning.banner import arithmetic_lines

ROOT = Path(__file__).resolve().parents[1]
RAW = mbc_config.read_yaml(ROOT / "config.yaml")
AMX = ar.Arithmetic("cpu", "amx", "planted")
AVX2 = ar.Arithmetic("cpu", "none", "planted", bf16_slowdown=14.0)
CUDA = ar.Arithmetic("cuda", "cuda", "planted")


@pytest.fixture(autouse=True)
def a_cxx_compiler(monkeypatch):
    """A C++ compiler is found, whatever this machine has (one test takes it away)."""
    monkeypatch.setattr(machine, "cxx_compiler", lambda: "/usr/bin/g++")


SAPPHIRE = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
ZEN4 = {"avx2", "avx512f", "avx512_bf16"}
EPYC_AVX2 = {"avx2", "fma"}


@pytest.mark.parametrize(
    ("flags", "limit", "capability", "kernels", "unit"),
    [
        (SAPPHIRE, None, "AVX512", ["brg_matmul:avx10_1_512_amx"], "amx"),
        (SAPPHIRE, None, "AVX512", None, "amx"),  # not probed: the flags decide
        (SAPPHIRE, "AVX2", "AVX512", [], "none"),  # the user's oneDNN limit wins
        (SAPPHIRE, "AVX512_CORE_BF16", "AVX512", ["brg_matmul:avx512_core_bf16"], "avx512_bf16"),
        (SAPPHIRE, None, "AVX2", ["brg_matmul:avx10_1_512_amx"], "none"),  # ATEN_CPU_CAPABILITY
        (SAPPHIRE, "NOT_AN_ISA", "AVX512", None, "none"),  # an unknown limit assumes nothing
        (SAPPHIRE, None, "AVX512", ["gemm:jit:bf16"], "none"),  # flags say AMX, oneDNN does not
        (ZEN4, None, "AVX512", ["brg_matmul:avx512_core_bf16"], "avx512_bf16"),
        (EPYC_AVX2, None, "AVX2", [], "none"),
        (set(), None, "DEFAULT", None, "none"),  # e.g. no /proc/cpuinfo
    ],
)
def test_the_matrix_unit_follows_flags_limits_and_kernels(flags, limit, capability, kernels, unit):
    got, evidence = machine.decide(flags, limit, capability, kernels)
    assert got == unit, evidence
    if limit:
        assert f"ONEDNN_MAX_CPU_ISA={limit}" in evidence


def test_auto_means_bf16_packed_compiled_only_where_measured_to_pay():
    assert (AMX.precision, AMX.pack, AMX.compile) == ("bf16", True, True)
    assert (CUDA.precision, CUDA.pack, CUDA.compile) == ("bf16", True, False)
    for unit in ("avx512_bf16", "none"):
        a = ar.Arithmetic("cpu", unit, "x")
        assert (a.precision, a.pack, a.compile) == ("fp32", False, False)
    assert AMX.why().startswith("bf16: this CPU has amx_bf16")
    assert "bf16 was not timed" in ar.Arithmetic("cpu", "avx512_bf16", "x").why()
    assert AVX2.why().startswith("fp32: no native bf16 matmul on this CPU")
    assert "bf16 would be ~14x slower here" in AVX2.why()


@pytest.mark.parametrize(
    ("unit", "slowdown", "chosen"),
    [
        ("avx512_bf16", 0.31, ("bf16", True, True)),  # the Zen 4 EPYC: its own bf16 kernels
        ("avx512_bf16", ar.BF16_PAYS_AT, ("bf16", True, True)),  # the threshold itself
        ("avx512_bf16", 0.9, ("fp32", False, False)),  # faster, but not clear of a busy probe
        ("avx512_bf16", 2.0, ("fp32", False, False)),  # the Xeon under an AVX512_CORE_BF16 limit
        ("none", 0.31, ("fp32", False, False)),  # no native bf16 matmul: a timing decides nothing
        ("amx", 2.0, ("bf16", True, True)),  # AMX's choice was measured on the whole step
    ],
)
def test_without_amx_bf16_is_chosen_only_where_the_probe_timed_it_faster(unit, slowdown, chosen):
    a = ar.Arithmetic("cpu", unit, "planted", bf16_slowdown=slowdown)
    assert (a.precision, a.pack, a.compile) == chosen
    if unit == "avx512_bf16":
        assert a.why().startswith(f"{chosen[0]}: avx512_bf16 without AMX"), a.why()
    if unit == "avx512_bf16" and chosen[0] == "bf16":
        assert f"ran {1 / slowdown:.1f}x faster than fp32 here" in a.why()
        assert ar.slow_precision_warning("bf16", a) is None  # an explicit bf16 is not warned
    elif unit == "avx512_bf16":
        assert f"ran {slowdown:.2f}x the fp32 time" in a.why()
        assert ar.slow_precision_warning("bf16", a) is not None


def test_without_amx_and_without_a_compiler_bf16_is_not_packed(monkeypatch):
    """Eager packs measured slower than one run there: packing pays only compiled."""
    monkeypatch.setattr(machine, "cxx_compiler", lambda: None)
    zen4 = ar.Arithmetic("cpu", "avx512_bf16", "planted", bf16_slowdown=0.4)
    assert (zen4.precision, zen4.pack, zen4.compile) == ("bf16", False, False)
    assert (AMX.precision, AMX.pack, AMX.compile) == ("bf16", True, False)  # AMX: measured


def test_the_probe_cache_is_kept_per_cpu_model(monkeypatch):
    """Without AMX a timing decides, and CPUs of two makes can share every flag."""
    flags = {"avx512_bf16"}
    monkeypatch.setattr(machine, "cpu_model_name", lambda: "AMD EPYC")
    a = machine.machine_key(flags, {})
    monkeypatch.setattr(machine, "cpu_model_name", lambda: "Intel(R) Xeon(R) Gold 6338")
    assert machine.machine_key(flags, {}) != a


def test_a_report_records_its_arithmetic_timing_included(tmp_path):
    """A bf16 report from a CPU where the timing chose bf16 is checked with bf16 run ids."""
    from mbc.measured import recorded_arithmetic

    zen4 = ar.Arithmetic("cpu", "avx512_bf16", "planted", bf16_slowdown=0.4)
    (tmp_path / "PROVENANCE").write_text(
        f"arithmetic: avx512_bf16 ({zen4.why()})\narithmetic resolved: {zen4.to_env()}\n"
    )
    got = recorded_arithmetic(tmp_path, {"x-bf16-1"})
    assert got == zen4 and got.precision == "bf16"
    (tmp_path / "PROVENANCE").write_text(f"arithmetic: avx512_bf16 ({zen4.why()})\n")
    assert recorded_arithmetic(tmp_path, set()).precision == "fp32"  # the timing was not kept


def test_the_resolved_arithmetic_travels_to_jobs_unchanged(monkeypatch):
    assert ar.Arithmetic.from_env(AVX2.to_env()) == AVX2
    monkeypatch.setenv(ar.ENV, AMX.to_env())
    assert ar.resolve("auto") == AMX  # a job never probes its own machine
    with pytest.raises(ValueError, match=ar.ENV):
        ar.Arithmetic.from_env(json.dumps({"matrix_unit": "tpu"}))


def _resolve_here(extra_env: dict, tmp_path: Path) -> dict:
    """The arithmetic this machine resolves in a fresh process under `extra_env`."""
    env = {k: v for k, v in os.environ.items() if k not in (ar.ENV, "ONEDNN_MAX_CPU_ISA")}
    env.update(extra_env, XDG_CACHE_HOME=str(tmp_path / "cache"))
    code = "import json, mbc.core.arithmetic as a; r = a.detect_cpu(); print(r.to_env())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_an_avx2_only_limit_resolves_fp32_on_any_cpu(tmp_path):
    got = _resolve_here({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}, tmp_path)
    assert got["matrix_unit"] == "none", got
    a = ar.Arithmetic(**got)
    assert a.precision == "fp32" and a.why().startswith("fp32: no native bf16 matmul")


def test_this_machines_own_capability_resolves_by_its_flags_and_kernels(tmp_path):
    got = _resolve_here({}, tmp_path)
    flags = machine.cpu_flags()
    if got["matrix_unit"] == "amx":
        assert "amx_bf16" in flags and "oneDNN bf16 kernels:" in got["evidence"]
        assert "amx" in got["evidence"].split("oneDNN bf16 kernels:")[1]
    else:
        assert got["matrix_unit"] in ("avx512_bf16", "none")
    # cached per machine and limits: the second answer is the first, without a probe
    cache = json.loads((tmp_path / "cache" / "mbc" / "arithmetic.json").read_text())
    assert list(cache.values()) == [got]


def test_a_corrupt_cache_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "mbc").mkdir()
    (tmp_path / "mbc" / "arithmetic.json").write_text('{"x": [1, 2')  # torn
    monkeypatch.setattr(machine, "probe", lambda env=None: {"capability": "AVX2", "kernels": []})
    assert ar.detect_cpu().matrix_unit == "none"
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"amx_bf16"})  # another key: a wrong type
    (tmp_path / "mbc" / "arithmetic.json").write_text(json.dumps({"k": 3}))
    assert ar.detect_cpu().matrix_unit == "none"


def _load(preset: str, arithmetic: ar.Arithmetic, **over) -> mbc_config.Config:
    return mbc_config.load(RAW, {"preset": preset, **over}, arithmetic=arithmetic)


def test_paper_cpu_trains_the_same_fp32_run_ids_on_every_machine():
    """The committed measurement is fp32 (the author's arithmetic): an AMX and an AVX2
    machine train the same run ids, and add to the same run store."""
    amx, avx2 = _load("paper_cpu", AMX), _load("paper_cpu", AVX2)
    assert set(amx.specs) == set(avx2.specs)
    assert {s.train.precision for s in amx.specs.values()} == {"fp32"}
    assert not any("bf16" in r for r in amx.specs)
    assert amx.raw["pack"]["enabled"] is False and avx2.raw["pack"]["enabled"] is False


# the fast path on one machine: paper_cpu with its arithmetic chosen by the hardware
AUTO = {"defaults": {"train": {"precision": "auto", "compile": "auto"}}}


def test_precision_auto_resolves_before_its_run_ids_exist():
    amx, avx2 = _load("paper_cpu", AMX, **AUTO), _load("paper_cpu", AVX2, **AUTO)
    assert {s.train.precision for s in amx.specs.values()} == {"bf16"}
    assert {s.train.compile for s in amx.specs.values()} == {True}
    assert all("-bf16-" in r for r in amx.specs)
    assert {s.train.precision for s in avx2.specs.values()} == {"fp32"}
    assert not any("bf16" in r for r in avx2.specs)
    assert amx.raw["pack"]["enabled"] is True and avx2.raw["pack"]["enabled"] is False
    assert len(amx.specs) == len(avx2.specs)  # the same runs, in another arithmetic


def test_pack_auto_packs_on_a_gpu_and_fp32_on_a_cpu_never(monkeypatch):
    assert _load("paper", CUDA, device="cuda").raw["pack"]["enabled"] is True
    # the paper preset is fp32 (the author's arithmetic): no probe, no pack on a CPU
    monkeypatch.setattr(ar, "detect_cpu", lambda *a, **k: pytest.fail("probed"))
    cfg = mbc_config.load(RAW, {"preset": "smoke", "device": "cpu"})
    assert cfg.raw["pack"]["enabled"] is False and cfg.arithmetic is None


def test_an_explicit_slow_precision_is_obeyed_with_one_warning():
    over = {"defaults": {"train": {"precision": "bf16"}}}
    slow = _load("smoke", AVX2, device="cpu", **over)
    assert {s.train.precision for s in slow.specs.values()} == {"bf16"}
    # pack.enabled is auto in the base config: that line comes first
    (chose, warning) = arithmetic_lines(slow)
    assert chose.startswith("mbc: arithmetic (auto): fp32") and "unpacked" in chose
    assert warning.startswith("mbc: warning: train.precision bf16 where bf16 matmuls do not pay")
    assert "\n" not in warning and "~14x slower" in warning
    fast = arithmetic_lines(_load("smoke", AMX, device="cpu", **over))
    assert len(fast) == 1 and "warning" not in fast[0]


def test_the_banner_says_what_auto_chose_and_why():
    (line,) = arithmetic_lines(_load("paper_cpu", AVX2, **AUTO))
    assert line.startswith("mbc: arithmetic (auto): fp32: no native bf16 matmul on this CPU")
    assert line.endswith("unpacked, eager")
    (line,) = arithmetic_lines(_load("paper_cpu", AMX, **AUTO))
    assert "bf16: this CPU has amx_bf16" in line and line.endswith("packed, compiled")


def test_without_a_cxx_compiler_auto_does_not_compile_and_says_why(monkeypatch):
    """inductor builds CPU kernels with a C++ compiler: without one, `auto` stays eager
    (compile is not in run ids: the same runs) and the banner says why."""
    with_cxx = set(_load("paper_cpu", AMX, **AUTO).specs)
    monkeypatch.setattr(machine, "cxx_compiler", lambda: None)
    assert (AMX.precision, AMX.pack, AMX.compile) == ("bf16", True, False)
    assert CUDA.compile is False and AVX2.compile_words() == ""
    cfg = _load("paper_cpu", AMX, **AUTO)
    assert {s.train.compile for s in cfg.specs.values()} == {False}
    assert set(cfg.specs) == with_cxx
    (line,) = arithmetic_lines(cfg)
    assert line.endswith("packed, eager (compile: no C++ compiler found: set CXX or install g++)")


def test_the_cxx_compiler_is_cxx_or_one_on_path(monkeypatch, tmp_path):
    """$CXX wins (a name on PATH or a file); else g++, c++ or clang++ on PATH; else None."""
    fake = tmp_path / "my-cxx"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.undo()  # the real lookup, not the autouse fixture's
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    assert machine.cxx_compiler() is None
    monkeypatch.setenv("CXX", str(fake))
    assert machine.cxx_compiler() == str(fake)
    monkeypatch.setenv("CXX", "my-cxx")
    assert machine.cxx_compiler() == str(fake)
    monkeypatch.delenv("CXX")
    (tmp_path / "g++").symlink_to(fake)
    assert machine.cxx_compiler() == "g++"


def test_precision_auto_is_a_config_value_and_nonsense_is_not():
    with pytest.raises(mbc_config.ConfigError, match="precision"):
        _load("smoke", AMX, defaults={"train": {"precision": "fp8"}})

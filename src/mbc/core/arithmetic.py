"""The arithmetic the hardware chooses: `train.precision: auto`, `train.compile: auto` and
`pack.enabled: auto`, resolved once per invocation on the machine that builds the DAG.

bf16 pays only where matmuls have a native bf16 path, and even there not everywhere
(docs/performance.md). One bf16 GEMM of this model's shape (2048 x 128 x 512, one thread) ran
5x faster than fp32 on a Xeon with AMX; on the same Xeon limited to oneDNN's avx512_core_bf16
kernels it ran 2x *slower*, but on an AMD EPYC (Zen 4) whose avx512_core_bf16 kernels are
its own it ran 3x faster and the whole training step 1.9x; without either it ran 50-70x
slower (oneDNN limited to AVX2: a reference kernel), and an AMD EPYC with AVX2 only trained
14x slower in bf16. So the choice follows the matrix unit, and without AMX the probe's timing:

  cuda                bf16, packed (one run leaves a GPU idle), eager
  amx                 bf16, packed, compiled (the combination measured 2.2x the fp32 step)
  avx512_bf16         bf16, packed, compiled where the probe's bf16 GEMM ran at most
                      BF16_PAYS_AT x the fp32 time (the EPYC: 2.1x the fp32 step); else fp32
  none                fp32, unpacked, eager (nothing else was measured to pay there)

The matrix unit is read from the CPU flags (/proc/cpuinfo) within the limits a user can set
(ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY: torch reports the effective capability), and
confirmed by the kernel names oneDNN's verbose mode prints for one bf16 matmul in a fresh
process, which also times that GEMM in bf16 and fp32 (the banner's "bf16 would be ~Nx
slower here"): `mbc.machine.probe` reads and times, this module decides. The answer is
cached per machine and limits
(`~/.cache/mbc/arithmetic.json`). The main Snakemake process exports what it resolved in
MBC_ARITHMETIC, so every job (local or on a cluster node of another make) uses the same
values and run ids.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mbc.machine import probe as machine

ENV = "MBC_ARITHMETIC"  # the resolved arithmetic, JSON, exported to every job
PRECISIONS = ("fp32", "bf16")

# what each matrix unit resolves `auto` to: (precision, pack, compile)
CHOICES = {
    "cuda": ("bf16", True, False),
    "amx": ("bf16", True, True),
    "avx512_bf16": ("fp32", False, False),  # where the probe did not time bf16 faster
    "none": ("fp32", False, False),
}
# avx512_bf16 where the probe timed bf16 faster: as with AMX (measured 2.1x the fp32 step on
# the EPYC; compiled 1.09x eager bf16, packing neutral there and one code path with AMX's)
BF16_WITHOUT_AMX = ("bf16", True, True)
# the bf16 / fp32 time of the probe's GEMM at or below which bf16 is chosen without AMX: well
# clear of both the 2x slower kernels (Xeon) and the 0.3-0.45 measured on the EPYC, so that a
# probe timed on a busy machine does not flip it
BF16_PAYS_AT = 0.7


@dataclass(frozen=True)
class Arithmetic:
    """What `auto` resolved to on this machine, and why (the banner's line)."""

    device: str  # cpu | cuda
    matrix_unit: str  # cuda | amx | avx512_bf16 | none
    evidence: str  # the flags, limits and kernels that decided it
    bf16_slowdown: float | None = None  # bf16 / fp32 time of one GEMM here (None: not timed)

    def bf16_timed_faster(self) -> bool:
        """Without AMX, whether the probe's bf16 GEMM ran at most BF16_PAYS_AT x fp32's."""
        s = self.bf16_slowdown
        return self.matrix_unit == "avx512_bf16" and s is not None and s <= BF16_PAYS_AT

    def _choice(self) -> tuple[str, bool, bool]:
        if self.bf16_timed_faster():
            return BF16_WITHOUT_AMX
        return CHOICES[self.matrix_unit]

    @property
    def precision(self) -> str:
        return self._choice()[0]

    @property
    def pack(self) -> bool:
        """Without AMX packing paid only compiled (eager packs measured slower than one run
        on the Zen 4 EPYC): where compile falls back to eager, no packs either."""
        if self.bf16_timed_faster() and not self.compile:
            return False
        return self._choice()[1]

    @property
    def compile(self) -> bool:
        """The matrix unit's choice, and on a CPU only where a C++ compiler is: inductor
        builds its CPU kernels with one, and a job without it would fail at its first step."""
        if self.device == "cpu" and machine.cxx_compiler() is None:
            return False
        return self._choice()[2]

    def compile_words(self) -> str:
        """Why compile is off where the matrix unit would compile ('' otherwise)."""
        if self._choice()[2] and not self.compile:
            return " (compile: no C++ compiler found: set CXX or install g++)"
        return ""

    def native_bf16(self) -> bool:
        return self.matrix_unit in ("cuda", "amx", "avx512_bf16")

    def why(self) -> str:
        """'bf16: this CPU has amx_bf16 (...)' or 'fp32: no native bf16 matmul ...'."""
        if self.matrix_unit == "cuda":
            return f"bf16: CUDA ({self.evidence})"
        if self.matrix_unit == "amx":
            return f"bf16: this CPU has amx_bf16 ({self.evidence})"
        slower = self.slowdown_words()
        if self.bf16_timed_faster():
            return (
                f"bf16: avx512_bf16 without AMX, where one bf16 GEMM ran "
                f"{1 / max(self.bf16_slowdown, 0.01):.1f}x faster than fp32 here ({self.evidence})"
            )
        if self.matrix_unit == "avx512_bf16":
            timed = (
                "bf16 was not timed"
                if self.bf16_slowdown is None
                else f"one bf16 GEMM ran {self.bf16_slowdown:.2f}x the fp32 time here"
            )
            return (
                f"fp32: avx512_bf16 without AMX, where {timed} (bf16 is chosen at "
                f"{BF16_PAYS_AT}x or less; {self.evidence}){slower}"
            )
        return f"fp32: no native bf16 matmul on this CPU ({self.evidence}){slower}"

    def slowdown_words(self) -> str:
        s = self.bf16_slowdown
        return f"; bf16 would be ~{s:.0f}x slower here" if s and s >= 1.5 else ""

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> Arithmetic:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("matrix_unit") not in CHOICES:
            raise ValueError(f"{ENV}: not a resolved arithmetic: {text[:80]!r}")
        return cls(
            **{k: data.get(k) for k in ("device", "matrix_unit", "evidence", "bf16_slowdown")}
        )


def cache_path() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "mbc" / "arithmetic.json"


def detect_cpu(env: dict | None = None, use_cache: bool = True) -> Arithmetic:
    """The CPU's matrix unit under the user's limits, probed once per machine and limits."""
    env = dict(os.environ if env is None else env)
    flags = machine.cpu_flags()
    key = machine.machine_key(flags, env)
    cache = cache_path()
    known: dict = {}
    if use_cache:
        with contextlib.suppress(OSError, ValueError):
            known = json.loads(cache.read_text())
        hit = known.get(key) if isinstance(known, dict) else None
        if isinstance(hit, dict):
            with contextlib.suppress(TypeError, ValueError):
                return Arithmetic.from_env(json.dumps(hit))
    seen = machine.probe(env)
    capability = str(seen.get("capability") or env.get("ATEN_CPU_CAPABILITY") or "")
    unit, evidence = machine.decide(
        flags, machine.onednn_limit(env), capability, seen.get("kernels")
    )
    if not seen:
        evidence += " (the oneDNN probe did not run: flags alone)"
    slowdown = None
    if seen.get("fp32_ms"):
        slowdown = round(float(seen["bf16_ms"]) / float(seen["fp32_ms"]), 2)
    found = Arithmetic("cpu", unit, evidence, slowdown)
    if use_cache and seen:
        from mbc.core.artifacts import write_text_atomic

        known = known if isinstance(known, dict) else {}
        known[key] = asdict(found)
        with contextlib.suppress(OSError):  # a read-only cache only costs a probe next time
            write_text_atomic(cache, json.dumps(known, indent=1, sort_keys=True))
    return found


def resolve(device: str = "auto") -> Arithmetic:
    """What `auto` means for this invocation: the main process's answer where it exported
    one (MBC_ARITHMETIC), else detected here (and cached)."""
    if text := os.environ.get(ENV):
        with contextlib.suppress(ValueError, TypeError):
            return Arithmetic.from_env(text)
    device = str(device)
    if device.startswith("cuda") or (device == "auto" and machine.cuda_available()):
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "requested"
        return Arithmetic("cuda", "cuda", name)
    return detect_cpu()


def slow_precision_warning(precision: str, arithmetic: Arithmetic) -> str | None:
    """One line where an explicitly configured bf16 is the slow choice on this machine."""
    if precision != "bf16" or arithmetic.precision == "bf16":
        return None
    return (
        "mbc: warning: train.precision bf16 where bf16 matmuls do not pay "
        f"({arithmetic.evidence}){arithmetic.slowdown_words()}: obeyed as configured; "
        "train.precision auto (or fp32) is faster here"
    )


# --- `auto` in a config (mbc.core.config_loader.load): resolved at most once, only if asked


class AutoArithmetic:
    """`auto` resolved at most once per load, and only if some value asks for it."""

    def __init__(self, device: str, given: Arithmetic | None = None):
        self.device, self.value = device, given
        self.asked = False  # some value was `auto`

    def __call__(self, asked: bool = True) -> Arithmetic:
        self.asked = self.asked or asked
        if self.value is None:
            self.value = resolve(self.device)
        return self.value

    def on_cuda(self) -> bool:
        """Whether the runs train on CUDA (asks torch only where a driver is)."""
        if self.device != "auto":
            return self.device.startswith("cuda")
        if self.value is not None or os.environ.get(ENV):
            return self(asked=False).device == "cuda"
        return machine.cuda_available()


def resolve_auto(train: dict, auto: AutoArithmetic | None) -> None:
    """train.precision / train.compile `auto` -> the hardware's choice (before the run id)."""
    for key in ("precision", "compile"):
        if train.get(key) == "auto":
            if auto is None:
                raise ValueError(f"train.{key} auto needs the machine's arithmetic")
            train[key] = getattr(auto(), key)


def pack_pays(specs: list, auto: AutoArithmetic) -> bool:
    """pack.enabled auto: on a GPU always (one run leaves it idle); on a CPU only where it was
    measured to pay: bf16 runs on a CPU whose matrix unit packs (AMX: one bf16 weight copy a
    step for the whole pack). An fp32 config on a CPU probes nothing."""
    if auto.on_cuda():
        return True
    return bool(specs) and all(s.train.precision == "bf16" for s in specs) and auto().pack


def slow_precision(specs: list, auto: AutoArithmetic) -> str | None:
    """bf16 asked for explicitly where this machine runs it slowly (no native bf16 matmul):
    obeyed, and one line for the banner. Only CPU runs are checked."""
    if not any(s.train.precision == "bf16" for s in specs) or auto.on_cuda():
        return None
    return slow_precision_warning("bf16", auto(asked=False))

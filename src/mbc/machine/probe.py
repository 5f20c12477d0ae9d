"""What this machine is, as `auto` arithmetic needs to know it (`mbc.core.arithmetic` decides
what to make of it): its CPU's flags and model name, the user's oneDNN ISA limit, the matrix
unit those allow (`decide`), the bf16 matmul kernels oneDNN runs and one GEMM timed in bf16 and
fp32 in a fresh process (`probe`), a C++ compiler for torch.compile, and CUDA. Reads nothing
of mbc and writes nothing; the answer's cache is core's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# oneDNN's ISA limits in increasing order (ONEDNN_MAX_CPU_ISA); bf16 matmuls are native from
# AVX512_CORE_BF16 on, AMX from AVX512_CORE_AMX on
ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX512_CORE_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512",
    "AVX10_1_512_AMX",
    "AVX10_1_512_AMX_FP16",
    "AVX10_2_512",
    "AVX10_2_512_AMX_2",
)
_NATIVE_BF16_FROM = "AVX512_CORE_BF16"
_AMX_FROM = "AVX512_CORE_AMX"


# the two precisions timed in alternation, the fastest of 7 each: a busy machine slows
# both alike, and a stall in one repeat does not decide (its answer sets the run ids)
_PROBE = r"""
import json, time, torch
torch.set_num_threads(1)
ops = {dt: (torch.randn(2048, 128, dtype=dt), torch.randn(128, 512, dtype=dt))
       for dt in (torch.bfloat16, torch.float32)}
for a, b in ops.values():
    for _ in range(2):
        a @ b
best = {dt: float("inf") for dt in ops}
for _ in range(7):
    for dt, (a, b) in ops.items():
        t0 = time.perf_counter()
        a @ b
        best[dt] = min(best[dt], (time.perf_counter() - t0) * 1e3)
print("MBC_PROBE " + json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
    "torch": torch.__version__, "fp32_ms": best[torch.float32], "bf16_ms": best[torch.bfloat16]}))
"""


def cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend (inductor) would build with: $CXX, else
    the first of g++, c++, clang++ on PATH; None where there is none."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx) or (cxx if os.path.isfile(cxx) else None)
    return next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)


def onednn_limit(env: dict | None = None) -> str | None:
    """The user's oneDNN ISA limit (ONEDNN_MAX_CPU_ISA, or its old name DNNL_MAX_CPU_ISA),
    upper-cased; None where unset or ALL/DEFAULT."""
    env = os.environ if env is None else env
    value = (env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return None if value in ("", "ALL", "DEFAULT") else value


def _at_least(limit: str | None, isa: str) -> bool:
    if limit is None:
        return True
    if limit not in ONEDNN_ISAS:  # a name this table does not know: do not assume bf16
        return False
    return ONEDNN_ISAS.index(limit) >= ONEDNN_ISAS.index(isa)


def decide(
    flags: set[str], limit: str | None, capability: str, kernels: list[str] | None
) -> tuple[str, str]:
    """(matrix unit, evidence) from the CPU flags, the oneDNN ISA limit, torch's effective
    CPU capability (ATEN_CPU_CAPABILITY caps it) and the bf16 matmul kernels oneDNN ran
    (None: not probed). Pure: tested on every case whatever CPU runs the tests."""
    said = []
    if limit:
        said.append(f"ONEDNN_MAX_CPU_ISA={limit}")
    if capability and not capability.upper().startswith("AVX512"):
        said.append(f"torch CPU capability {capability}")
        return "none", ", ".join([*said, "bf16 matmuls not native at this capability"])
    unit = "none"
    if "amx_bf16" in flags and _at_least(limit, _AMX_FROM):
        unit, said = "amx", [*said, "flag amx_bf16"]
    elif "avx512_bf16" in flags and _at_least(limit, _NATIVE_BF16_FROM):
        unit, said = "avx512_bf16", [*said, "flag avx512_bf16"]
    else:
        bf16 = sorted(f for f in flags if f in ("amx_bf16", "avx512_bf16"))
        said.append(f"flags {', '.join(bf16)} above the limit" if bf16 else "no bf16 flag")
    if kernels is not None:
        seen = ", ".join(kernels) or "none"
        said.append(f"oneDNN bf16 kernels: {seen}")
        # a kernel's ISA is the part after the last colon: `gemm:jit:bf16` converts to
        # fp32 (not native), `brg_matmul:avx512_core_bf16` and `..._amx` are native
        isas = [k.rsplit(":", 1)[-1] for k in kernels]
        if unit == "amx" and not any("amx" in i for i in isas):
            unit = "avx512_bf16" if any("_bf16" in i for i in isas) else "none"
        elif unit == "avx512_bf16" and not any("_bf16" in i or "amx" in i for i in isas):
            unit = "none"
    return unit, ", ".join(said)


def cpu_flags() -> set[str]:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    return set()


def probe(env: dict | None = None) -> dict:
    """One bf16 matmul in a fresh process under oneDNN's verbose mode (what this torch runs
    under the user's limits), with one GEMM timed in bf16 and fp32: {capability, torch,
    fp32_ms, bf16_ms, kernels (the bf16 matmul kernels' names), isa}; {} if it fails."""
    env = dict(os.environ if env is None else env, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=180,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    result = re.search(r"^MBC_PROBE (.+)$", out, re.M)
    if not result:
        return {}
    data = json.loads(result.group(1))
    data["kernels"] = sorted(set(re.findall(r"exec,cpu,matmul,([^,]+),[^,]*,src:bf16", out)))
    isa = re.search(r"cpu,isa:([^\n]+)", out)  # the ISA oneDNN dispatches to, as it names it
    data["isa"] = isa.group(1).strip() if isa else None
    return data


def machine_key(flags: set[str], env: dict) -> str:
    limits = [
        env.get(k, "") for k in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
    ]
    bf16 = sorted(f for f in flags if "bf16" in f or f.startswith("amx"))
    # the CPU model too: without AMX a timing decides, and two makes share these flags
    return "|".join([sys.executable, cpu_model_name(), *bf16, *limits])


def cpu_model_name() -> str:
    """/proc/cpuinfo's `model name` ('' where there is none)."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def cuda_available() -> bool:
    """CUDA usable here; torch (slow to import) is asked only where an NVIDIA driver is."""
    if not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists()):
        return False
    import torch

    return torch.cuda.is_available()

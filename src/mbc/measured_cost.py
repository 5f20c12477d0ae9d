"""What a committed measurement cost, in words, from its PROVENANCE (`mbc.measured`):
docs/running.md's cost block and the README's cost clause (`mbc.readme_results`)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path


class ResultsError(ValueError):
    """A measured report or README the block cannot be made from (one line, naming the file)."""


def provenance_fields(path: Path) -> dict[str, str]:
    """PROVENANCE's `key: value` lines, the first of each key (`commit:` repeats)."""
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                out.setdefault(key, value)
    return out


def training_cost(prov: dict[str, str]) -> str:
    """What training the report cost, as PROVENANCE records it (`mbc.measured`): its jobs'
    active hours; where every start was on the CPU, with the threads and the CPU, else by
    device. Empty where it does not say."""
    m = re.match(
        r"([\d.]+) h in (\d+) training job\(s\) \((.*?)\);", prov.get("training job time", "")
    )
    if not m:
        return ""
    hours, n, split = float(m.group(1)), int(m.group(2)), m.group(3)
    jobs = f"{hours:.1f} h of training in {n} job{'s' if n != 1 else ''}"
    if not re.fullmatch(r"cpu \(\d+\)", prov.get("device", "")):
        return f"; {jobs} ({split})"
    threads = re.fullmatch(r"(\d+) \(\d+\)", prov.get("threads per training job", ""))
    cpu = re.fullmatch(r"([^,]+) \(\d+\)", prov.get("CPU", ""))  # one CPU only
    per = f" of {threads.group(1)} thread(s)" if threads else ""
    return f"; {jobs}{per}" + (f" on {cpu.group(1)}" if cpu else "")


def render_cost(measured: Path, link: str) -> str:
    """docs/running.md's cost of the committed measurement, as its PROVENANCE records it:
    runs, training steps by device, the training jobs' time, and the span from the first
    start to the last end (which counts the gaps between sessions). `link`: the report's
    folder as that page links it."""
    prov = provenance_fields(measured / "PROVENANCE")
    runs = prov.get("runs", "").split(" ")[0]
    if not runs:
        raise ResultsError(f"{measured / 'PROVENANCE'}: no 'runs:' line")
    steps = prov.get("total training steps", "?")
    by_device = prov.get("steps by device")
    text = (
        f"- Measured ([`{link}/PROVENANCE`]({link}/PROVENANCE)): {runs} runs, {steps} training"
        f" steps{f' ({by_device})' if by_device else ''}{training_cost(prov)}."
    )
    wall = re.match(r"([\d.]+) h", prov.get("wall time", ""))
    if wall and "started" in prov and "ended" in prov:
        text += (
            f" From its first start to its last end {float(wall.group(1)):.1f} h"
            f" ({prov['started']} to {prov['ended']}), the gaps between sessions included."
        )
    if (measured / "STALE").is_file():
        text += " It is the previous configuration's measurement (`STALE`)."
    wrapped = textwrap.wrap(
        text, 100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )
    return "\n".join(wrapped) + "\n"

"""How the pipeline writes durations and sizes for people (the banner, `mbc.estimate`, the
training jobs' progress lines): one formatter each, so that every place says them alike."""

from __future__ import annotations

import math


def duration(seconds: float) -> str:
    """12m05s, 3h07m, 2.5 days; n/a for a duration that is not finite."""
    if not math.isfinite(seconds):
        return "n/a"
    h, rem = divmod(int(round(seconds)), 3600)
    if h >= 48:
        return f"{h / 24:.1f} days"
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def size(n_bytes: float) -> str:
    """Bytes in decimal units: 512 B, 747.9 kB, 3.1 GB."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n_bytes < 1000 or unit == "TB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return ""

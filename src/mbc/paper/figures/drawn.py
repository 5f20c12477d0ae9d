"""What a figure drew, recorded where it draws it, so that its caption says only that.

A drawing helper that puts on the page an element a caption may name (a fitted line, a
censored marker, an inset, ...) calls `drew` with the element's name; one that was asked
for an element and had nothing to draw calls `absent` with the reason, in words. The
registry hands the record (`Drawn`) to `mbc.paper.figures.captions`, which assembles the
caption from it: a caption cannot name a line the figure left out, nor keep silent about
one it was asked for and could not draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matplotlib.artist import Artist
from matplotlib.figure import Figure

_ATTR = "_mbc_drawn"


@dataclass
class Drawn:
    """The elements a figure drew, and those it could not, each with its reasons."""

    present: set[str] = field(default_factory=set)
    absent: dict[str, list[str]] = field(default_factory=dict)

    def has(self, element: str) -> bool:
        return element in self.present

    def why_absent(self, element: str) -> list[str]:
        return self.absent.get(element, [])


def _root(where: Artist | Figure) -> Figure:
    fig = where if isinstance(where, Figure) else where.get_figure(root=True)
    if fig is None:
        raise ValueError("an element drawn outside any figure")
    return fig


def record(where: Artist | Figure) -> Drawn:
    """The figure's record (made on first use)."""
    fig = _root(where)
    if not hasattr(fig, _ATTR):
        setattr(fig, _ATTR, Drawn())
    return getattr(fig, _ATTR)


def drew(where: Artist | Figure, element: str) -> None:
    """`element` is on the page of `where`'s figure."""
    record(where).present.add(element)


def absent(where: Artist | Figure, element: str, why: str) -> None:
    """`element` was asked for and not drawn, because `why` (said once per reason)."""
    reasons = record(where).absent.setdefault(element, [])
    if why not in reasons:
        reasons.append(why)

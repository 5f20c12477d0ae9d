"""The parts of docs/method.md that restate config.yaml, generated from it so they cannot drift.

`python -m mbc.doc_tables docs/method.md` rewrites every block between the lines
`<!-- generated: NAME ... -->` and `<!-- end generated: NAME -->` from the paper preset's
config (NAME: hypotheses, scorecard, statistics); `--check` only names the blocks that differ
(tests/test_doc_drift.py runs it). Everything outside the blocks is hand-written.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from mbc import config as mbc_config
from mbc.analysis.hypotheses import rule_text
from mbc.analysis.scorecard import reference_text, tolerance_text
from mbc.analysis.stat_schema import PARAMS
from mbc.analysis.stats import what_text
from mbc.core.artifacts import write_text_atomic
from mbc.core.config import Config

COMMAND = "python -m mbc.doc_tables docs/method.md"
BLOCK = re.compile(
    r"(?P<open><!-- generated: (?P<name>\w+)[^\n]*-->\n)(?P<body>.*?)(?P<close><!-- end generated: (?P=name) -->)",
    re.S,
)


def cell(text: str) -> str:
    """Text for a Markdown table cell (a `|` would end the cell)."""
    return str(text).replace("|", "\\|")


def code(name: str | None) -> str:
    return f"`{name}`" if name else "–"


def hypotheses_md(cfg: Config) -> str:
    """One subsection per hypothesis: its mechanism, prediction and tests as config declares
    them (`rule_text`: the decision rule the verdict applies)."""
    out = []
    for h in cfg.hypotheses.items:
        out += [f"### {h.id}", f"**Mechanism:** {h.mechanism}. **Prediction:** {h.prediction}.", ""]
        for t in h.tests:
            ours = f" (ours: {code(t.ours)})" if t.ours and t.ours != t.statistic else ""
            why = f" **Why:** {t.why}." if t.why else ""
            out.append(f"- **Test:** {code(t.statistic)}: {rule_text(t)}{ours}.{why}")
        out.append("")
    return "\n".join(out)


def scorecard_md(cfg: Config) -> str:
    """The scorecard's rows: claim, statistic (ours beside it), the paper's reference, where
    it is traced, the agreement rule; then the references' notes."""
    out = [
        "| claim | statistic | ours | reference | traced | agrees when |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for row in cfg.scorecard.rows:
        ref = row.reference()
        claim = f"{row.id}: {row.claim}" if row.id else row.claim
        traced = ref["traced"] + (" (note)" if ref.get("note") else "")
        out.append(
            f"| {cell(claim)} | {code(row.statistic)} | {code(row.ours)} | "
            f"{cell(reference_text(ref))} | {traced} | {cell(tolerance_text(row.rule(), ref))} |"
        )
        if ref.get("note"):
            notes.append(f"- {row.claim}: {ref['note']}.")
    return "\n".join([*out, "", "Notes:", "", *notes, ""])


def where_text(where: dict | None) -> str:
    """A statistic's `where`, as conditions on its table's columns."""
    ops = {"min": ">=", "max": "<=", "above": ">", "below": "<"}
    parts = []
    for col, cond in (where or {}).items():
        if isinstance(cond, dict):
            parts += [f"{col} {ops[op]} {v:g}" for op, v in cond.items()]
        elif isinstance(cond, list):
            parts.append(
                f"{col} in {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in cond)}"
            )
        else:
            parts.append(f"{col} = {cond}")
    return "; ".join(parts) or "–"


def statistics_md(cfg: Config) -> str:
    """config `statistics`, in statistics.csv's order: name, kind, the table and runs it
    reads, and what it is."""
    out = ["| name | kind | table | experiments | where | what |", "|---|---|---|---|---|---|"]
    for s in cfg.statistics.declared:
        st = s.as_dict()
        table = st.get("table", PARAMS[s.kind].table)
        exps = ", ".join(st.get("experiments", [])) or "all in its table"
        out.append(
            f"| `{s.name}` | {s.kind} | {table} | {exps} | {cell(where_text(st.get('where')))} "
            f"| {cell(what_text(st))} |"
        )
    return "\n".join([*out, ""])


BLOCKS: dict[str, Callable[[Config], str]] = {
    "hypotheses": hypotheses_md,
    "scorecard": scorecard_md,
    "statistics": statistics_md,
}


def render(text: str, cfg: Config) -> tuple[str, list[str]]:
    """(text with every generated block rewritten, the names of the blocks that changed)."""
    changed = []

    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}; known: {sorted(BLOCKS)}")
        body = BLOCKS[name](cfg)
        if body != m["body"]:
            changed.append(name)
        return m["open"] + body + m["close"]

    return BLOCK.sub(one, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mbc.doc_tables", description=__doc__)
    parser.add_argument("doc", help="the Markdown file (docs/method.md)")
    parser.add_argument("--config", default="config.yaml", help="the workflow's config.yaml")
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 on a difference"
    )
    args = parser.parse_args(argv)
    cfg = mbc_config.load(mbc_config.read_yaml(args.config), {"preset": "paper"})
    path = Path(args.doc)
    text, changed = render(path.read_text(encoding="utf-8"), cfg)
    if args.check:
        if changed:
            print(
                f"mbc: {path}: generated block(s) {', '.join(changed)} differ from config; run {COMMAND}"
            )
        return 1 if changed else 0
    if changed:
        write_text_atomic(path, text)
    print(
        f"mbc: {path}: {len(changed)} block(s) rewritten ({', '.join(changed) or 'none changed'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

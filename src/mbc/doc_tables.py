"""The parts of docs/method.md that restate config.yaml, generated from it so they cannot drift.

`python -m mbc.doc_tables docs/method.md` rewrites every block between the lines
`<!-- generated: NAME ... -->` and `<!-- end generated: NAME -->` from the paper preset's
config (NAME: regimes, experiments, hypotheses, scorecard, statistics); `--check` only names
the blocks that differ
(tests/test_doc_drift.py runs it). Everything outside the blocks is hand-written.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from mbc import config as mbc_config
from mbc.analysis.hypotheses import rule_text
from mbc.analysis.scorecard import reference_text, tolerance_text
from mbc.analysis.stat_schema import PARAMS
from mbc.analysis.stats import what_text
from mbc.config import Config
from mbc.core.artifacts import write_text_atomic

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


def _steps(n: int) -> str:
    return f"{n:,}"


def _sci(v: float) -> str:
    """A learning rate as the docs write it: 1e-3, 5e-4."""
    mantissa, exp = f"{v:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"


def _early_stop(t) -> str:
    """What ends a run before its budget (`train.early_stop_*`, mbc.core.spec.TrainSpec)."""
    if t.early_stop_tau_factor == 0:
        return "none"
    series = "L1 on the training log" if t.early_stop_series == "train_log" else "L_cand"
    waits = [
        name
        for name, on in (
            ("evaluated", t.early_stop_first_target),
            ("logged", t.early_stop_first_target_log),
        )
        if on
    ]
    wait = f"; waits for the {' and '.join(waits)} L1 crossing" if waits else ""
    return (
        f"{t.early_stop_tau_factor:g} τ and {series} < {t.early_stop_loss_fraction:g} log K{wait}"
    )


def _values(runs, get, fmt=str) -> str:
    """The values `get` takes over an experiment's runs, in order, each once."""
    return ", ".join(fmt(v) for v in sorted({get(r.spec.train) for r in runs}))


def regimes_md(cfg: Config) -> str:
    """Each training experiment's regime and budget, read off the runs config expands it to
    (its `set`, `like` and grid over `defaults.train`), so a changed budget changes the row."""
    out = [
        "| experiment | schedule | warm-up (steps) | clip (grad norm) | budget (steps) "
        "| batch | lr | early stop |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r.experiment for r in cfg.runs):
        runs = cfg.experiment_runs(name)
        out.append(
            f"| {name} | {_values(runs, lambda t: t.schedule, code)} "
            f"| {_values(runs, lambda t: t.warmup_steps, _steps)} "
            f"| {_values(runs, lambda t: t.clip_norm, lambda c: str(c) if c else 'none')} "
            f"| {_values(runs, lambda t: t.max_steps, _steps)} "
            f"| {_values(runs, lambda t: t.batch_size)} | {_values(runs, lambda t: t.lr, _sci)} "
            f"| {cell(_values(runs, _early_stop))} |"
        )
    return "\n".join([*out, ""])


def experiments_md(cfg: Config) -> str:
    """Every training experiment once: its id, config's `question`, the experiment it starts
    from (`like`) and how many distinct runs it expands to; then the preset's total."""
    declared = cfg.raw["experiments"]
    out = ["| experiment | question | like | runs |", "|---|---|---|---|"]
    questions = cfg.questions()  # the report's table of experiments reads the same
    names = list(questions)
    for name in names:
        out.append(
            f"| {name} | {cell(questions[name] or '–')} | {declared[name].get('like') or '–'} "
            f"| {len(cfg.run_ids(name))} |"
        )
    listed = sum(len(cfg.run_ids(n)) for n in names)
    out += [
        "",
        f"{len(cfg.specs)} distinct runs in all"
        + (
            f" ({listed} in the rows: a run in two experiments counts in both and trains once)."
            if listed != len(cfg.specs)
            else "."
        ),
        "",
    ]
    return "\n".join(out)


BLOCKS: dict[str, Callable[[Config], str]] = {
    "regimes": regimes_md,
    "experiments": experiments_md,
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
    try:
        original = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"mbc.doc_tables: '{args.doc}': {exc.strerror}", file=sys.stderr)
        return 2
    text, changed = render(original, cfg)
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

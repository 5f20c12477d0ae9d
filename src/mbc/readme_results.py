"""The README's results block, docs/results.md's departures and docs/running.md's cost,
generated from a committed measured report.

    python -m mbc.readme_results [--check] [--readme README.md] [--docs DOCS]
                                 [--measured measured/paper_cpu]

rewrites what lies between `<!-- results:begin -->` and `<!-- results:end -->` in the README
from `scorecard.csv` and `hypotheses.csv` of the measured report (`mbc.measured`): the tally,
the scorecard rows with their rule and result, the seven verdicts beside the paper's, and a
warning when the report carries a `STALE` file. Between `<!-- departures:begin -->` and
`<!-- departures:end -->` in DOCS (default: docs/results.md beside the README) it writes every
row and verdict that departs from the paper, each with the cause config.yaml records for it.
Between `<!-- cost:begin -->` and `<!-- cost:end -->` in docs/running.md beside the README
(where that page exists) it writes what the measurement cost, from its PROVENANCE.
`--check` changes nothing and fails when any block differs, so no page can drift from
`measured/` (tests/test_readme_results.py). The paper's verdicts are labelled references:
hypotheses.csv's `paper_verdict` column, or for a report collected before it had one, config's
`hypotheses.<id>.paper_verdict.verdict`; the same holds for a row's `cause` and `explanation`,
taken from config only where its statistic is still the one the report measured.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import os
import sys
import textwrap
from pathlib import Path

import yaml

from mbc.analysis.scorecard import COLUMNS, LATER_COLUMNS
from mbc.core.artifacts import write_text_atomic
from mbc.measured_cost import ResultsError, render_cost  # noqa: F401 (docs/running.md's block)
from mbc.measured_cost import provenance_fields as _provenance
from mbc.measured_cost import training_cost as _cost
from mbc.paper.config_sections import CAUSES

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
DEPARTURES_BEGIN = "<!-- departures:begin -->"
DEPARTURES_END = "<!-- departures:end -->"
COST_BEGIN = "<!-- cost:begin -->"
COST_END = "<!-- cost:end -->"
# the scorecard.csv columns both blocks require (mbc.analysis.scorecard owns the table)
SCORECARD_COLUMNS = tuple(c for c in COLUMNS if c not in LATER_COLUMNS)
DASH = "–"


def _rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.is_file():
        raise ResultsError(f"{path}: missing")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ResultsError(f"{path}: no column {', '.join(missing)}")
        return list(reader)


def _num(text: str) -> str:
    """A measured value as the report prints it: 3 significant digits, thousands in full."""
    if text in ("", "nan"):
        return DASH
    v = float(text)
    if v == 0:
        return "0"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _value_ci(value: str, lo: str, hi: str) -> str:
    if lo in ("", "nan") or hi in ("", "nan"):
        return _num(value)
    return f"{_num(value)} [{_num(lo)}, {_num(hi)}]"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip() or DASH


def _result(agreement: str) -> str:
    """Bold where the measurement and the reference part, so a reader's eye finds it."""
    return agreement if agreement == "agree" else f"**{agreement}**"


def _prose(text: str) -> list[str]:
    """A paragraph wrapped as the README's prose is (never inside a link or a path)."""
    return [*textwrap.wrap(text, 100, break_long_words=False, break_on_hyphens=False), ""]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(_cell(c) for c in r) + " |" for r in rows),
    ]


def _paper_verdicts(hypotheses: list[dict[str, str]], config: Path) -> dict[str, str]:
    """Each hypothesis's verdict in the paper: the report's column, else config's reference."""
    ids = list(dict.fromkeys(r["id"] for r in hypotheses))
    found = {r["id"]: r["paper_verdict"] for r in hypotheses if r.get("paper_verdict")}
    if len(found) < len(ids):
        declared = _declared(config).get("hypotheses") or {}
        for h in ids:
            found.setdefault(h, ((declared.get(h) or {}).get("paper_verdict") or {}).get("verdict"))
    lacking = [h for h in ids if not found.get(h)]
    if lacking:
        raise ResultsError(
            f"{config}: hypotheses.{lacking[0]}.paper_verdict.verdict is not declared "
            f"(the paper's verdict, a labelled reference)"
        )
    return found


def _first_per_id(hyp: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """One row per hypothesis, in the table's order: its tests' rows repeat the verdict."""
    out: dict[str, dict[str, str]] = {}
    for r in hyp:
        out.setdefault(r["id"], r)
    return out


def _stored_of(measured: Path, config: Path) -> tuple[int, int] | None:
    """(runs stored, the preset's runs) where the report has a run store (`<measured>/runs/`,
    mbc.run_store), else None."""
    runs = measured / "runs"
    if not runs.is_dir():
        return None
    from mbc import config as mbc_config  # the config only where a store is

    cfg = mbc_config.load(mbc_config.read_yaml(config), {"preset": measured.name})
    stored = {p.name for p in runs.iterdir() if (p / "entry.json").is_file()} & set(cfg.specs)
    return len(stored), len(cfg.specs)


def lead_sentence(
    measured: Path,
    stored: tuple[int, int] | None,
    agree: tuple[int, int],
    match: tuple[int, int],
) -> list[str]:
    """The block's first sentence, in plain words: what the committed tables show
    (`agree`: the paper's rows that agree, of all; `match`: verdicts that match, of all),
    and whether they are complete, stale, or a partial re-measure (N of M runs stored)."""
    prov = _provenance(measured / "PROVENANCE")
    runs = prov.get("runs", "").split(" ")[0]
    partial = stored is not None and stored[0] < stored[1]
    claims = f"{agree[0]} of the paper's {agree[1]} claims"
    verdicts = f"{match[0]} of its {match[1]} verdicts"
    if (measured / "STALE").is_file():
        text = (
            f"**In short:** under the previous configuration ({runs + ' runs, ' if runs else ''}"
            f"now stale) {claims} reproduced and {verdicts} matched"
        )
    else:
        whole = "" if partial else "complete"
        said = ", ".join(x for x in (f"{runs} runs" if runs else "", whole) if x)
        text = (
            f"**In short:** the committed measurement{f' ({said})' if said else ''} "
            f"reproduces {claims} and matches {verdicts}"
        )
    if partial:
        text += (
            f"; the re-measure of the current configuration is partial, {stored[0]} of "
            f"{stored[1]} runs stored so far"
        )
    return _prose(text + ".")


def store_sentence(measured: Path, stored: tuple[int, int] | None, link: str) -> list[str]:
    """Where the report's run store holds fewer runs than the preset has: where they are and
    what a clone does with them, so that a partial measurement never reads as whole (none
    without a store, or with every run stored)."""
    if stored is None or stored[0] == stored[1]:
        return []
    return _prose(
        f"The {stored[0]} stored runs are in [`{link}/runs/`]({link}/runs/) "
        f"(`python -m mbc.run_store list --preset {measured.name}` counts them by experiment); "
        "a clone restores them instead of training them, and the tables below are rebuilt from "
        "the store once it is whole."
    )


def render(measured: Path, config: Path, link: str) -> str:
    """The block between the markers, from the report in `measured`; `link` is that folder
    as the README links it (relative to the README)."""
    card = _rows(measured / "scorecard.csv", SCORECARD_COLUMNS)
    hyp = _rows(measured / "hypotheses.csv", ("id", "mechanism", "verdict", "ours_verdict"))
    paper = _paper_verdicts(hyp, config)
    verdicts = _first_per_id(hyp)
    papers_rows = [r for r in card if r["reference_traced"] != "ours"]
    our_rows = [r for r in card if r["reference_traced"] == "ours"]
    n_agree = sum(r["agreement"] == "agree" for r in papers_rows)
    n_ours = sum(r["agreement"] == "agree" for r in our_rows)
    differ = [h for h, r in verdicts.items() if r["verdict"] != paper[h]]
    n_match = len(verdicts) - len(differ)

    stored = _stored_of(measured, config)  # loads the config: once
    out = lead_sentence(measured, stored, (n_agree, len(papers_rows)), (n_match, len(verdicts)))
    out += store_sentence(measured, stored, link)
    stale = measured / "STALE"
    if stale.is_file():
        reason = " ".join(stale.read_text().split()) or "no reason given"
        warning = _prose(
            f"**STALE: these results no longer match the configuration.** "
            f"[`{link}/STALE`]({link}/STALE) says: {reason}"
        )
        out += [f"> {line}" if line else "" for line in warning]
    prov = _provenance(measured / "PROVENANCE")
    runs = prov.get("runs", "").split(" ")[0]
    out += _prose(
        f"Measured by the `{measured.name}` preset"
        + (f" ({runs} runs{_cost(prov)})" if runs else "")
        + f"; the report{' (of the previous configuration: STALE)' if stale.is_file() else ''}: "
        f"[`{link}/main.pdf`]({link}/main.pdf), how and where it was trained: "
        f"[`{link}/PROVENANCE`]({link}/PROVENANCE)."
    )
    out += _prose(
        f"**{n_agree} of the paper's {len(papers_rows)} scorecard rows agree, "
        f"{n_match} of {len(verdicts)} verdicts match the paper's**"
        + (f" ({', '.join(differ)} {'does' if len(differ) == 1 else 'do'} not)" if differ else "")
        + (f"; {n_ours} of our own {len(our_rows)} claims hold." if our_rows else ".")
    )
    out += _table(
        ["claim", "paper", "measured [CI]", "n", "agrees when", "result", "our definition"],
        [
            [
                r["claim"],
                r["paper_reference"],
                _value_ci(r["measured"], r["ci_low"], r["ci_high"]),
                r["n"],
                r["tolerance"],
                _result(r["agreement"]),
                DASH if r["ours_statistic"] == r["statistic"] else _result(r["ours_agreement"]),
            ]
            for r in papers_rows
        ],
    )
    out += [""]
    out += _table(
        ["", "mechanism", "paper", "ours", "our definition", "match"],
        [
            [
                h,
                r["mechanism"],
                paper[h],
                r["verdict"],
                r["ours_verdict"],
                "yes" if h not in differ else "**no**",
            ]
            for h, r in verdicts.items()
        ],
    )
    if our_rows:
        out += ["", "Claims of our own, stated before their runs:", ""]
        out += _table(
            ["", "claim", "predicted", "measured [CI]", "agrees when", "result"],
            [
                [
                    r["id"],
                    r["claim"],
                    r["paper_reference"],
                    _value_ci(r["measured"], r["ci_low"], r["ci_high"]),
                    r["tolerance"],
                    _result(r["agreement"]),
                ]
                for r in our_rows
            ],
        )
    return "\n".join(out) + "\n"


def _declared(config: Path) -> dict:
    return yaml.safe_load(config.read_text()) or {}


def _reasons(rows: list[dict[str, str]], key: str, config_entry) -> dict:
    """(cause, explanation) per row's `key`: the report's own columns, or, for a report
    collected before it had them, config's `explanation` where `config_entry(row)` finds the
    entry that still measures the row's statistic (cause None where none does)."""
    out = {}
    for r in rows:
        if "cause" in r:
            out[r[key]] = (r["cause"], r.get("explanation", ""))
        elif (entry := config_entry(r)) is None:
            out[r[key]] = (None, "")
        else:
            e = entry.get("explanation") or {}
            out[r[key]] = (e.get("cause", ""), e.get("text", ""))
    return out


def _reason(cause: str | None, text: str) -> str:
    if cause is None:
        return (
            "*Config.yaml now measures it by another statistic; its reason is for that one, "
            "not for this report's.*"
        )
    if not cause:
        return "*No cause is recorded in config.yaml for it.*"
    head = f"*Cause: {CAUSES.get(cause, cause)}.*"
    return f"{head} {text[:1].upper()}{text[1:]}." if text else head


def render_departures(measured: Path, config: Path, link: str) -> str:
    """docs/results.md's departures: every scorecard row of the paper's that disagrees or
    agrees by one definition only, every verdict that differs from the paper's, every claim
    of our own that does not hold; each with its numbers, its rule and config's reason.
    `link` is the measured folder as the page links it."""
    card = _rows(measured / "scorecard.csv", SCORECARD_COLUMNS)
    hyp = _rows(measured / "hypotheses.csv", ("id", "mechanism", "statistic", "verdict"))
    declared = _declared(config)
    paper = _paper_verdicts(hyp, config)

    def row_entry(r):
        for e in declared.get("scorecard") or []:  # a statistic may be a glob (`_at_*`)
            if e.get("claim") == r["claim"] and fnmatch.fnmatchcase(
                r["statistic"], e.get("statistic", "")
            ):
                return e
        return None

    def hyp_entry(r):
        h = (declared.get("hypotheses") or {}).get(r["id"]) or {}
        tests = [t.get("statistic", "") for t in h.get("tests") or []]
        mine = [x["statistic"] for x in hyp if x["id"] == r["id"]]
        return h if all(any(fnmatch.fnmatchcase(m, t) for t in tests) for m in mine) else None

    row_reason = _reasons(card, "claim", row_entry)
    hyp_reason = _reasons(hyp, "id", hyp_entry)
    papers = [r for r in card if r["reference_traced"] != "ours"]
    ours = [r for r in card if r["reference_traced"] == "ours"]

    def _line(r, result: str, reference: str = "paper") -> str:
        measured_ = _value_ci(r["measured"], r["ci_low"], r["ci_high"])
        return (
            f"- **{r['claim']}** (`{r['statistic']}`): {reference} {r['paper_reference']}; "
            f"measured {measured_}; agrees when {r['tolerance']}: **{result}**."
        )

    out: list[str] = []
    if (measured / "STALE").is_file():
        out += _prose(
            f"**STALE:** these are the rows of a report that no longer matches the "
            f"configuration ([`{link}/STALE`]({link}/STALE) says why)."
        )
    out += _prose(
        f"Generated from [`{link}`]({link}) by `python -m mbc.readme_results`; the reasons are "
        "the `explanation` config.yaml gives each row, as the report recorded it (its Section "
        '"Why the rest differs" prints the same).'
    )
    sections = [
        (
            "Scorecard rows that disagree",
            [
                _line(r, r["agreement"]) + " " + _reason(*row_reason[r["claim"]])
                for r in papers
                if r["agreement"] != "agree"
            ],
        ),
        (
            "Rows that agree by the author's statistic but not by our uniform one",
            [
                _line(r, "agree")
                + f" By ours (`{r['ours_statistic']}`): "
                + f"{_value_ci(r['ours_measured'], r['ours_ci_low'], r['ours_ci_high'])}, "
                + f"**{r['ours_agreement']}**. "
                + _reason(*row_reason[r["claim"]])
                for r in papers
                if r["agreement"] == "agree"
                and r["ours_statistic"] != r["statistic"]
                and r["ours_agreement"] != "agree"
            ],
        ),
        (
            "Verdicts that differ from the paper's",
            [
                f"- **{h}, {r['mechanism']}**: ours {r['verdict']}, the paper's {paper[h]}. "
                + _reason(*hyp_reason[h])
                for h, r in _first_per_id(hyp).items()
                if r["verdict"] != paper[h]
            ],
        ),
        (
            "Claims of our own that do not hold",
            [_line(r, r["agreement"], "predicted") for r in ours if r["agreement"] != "agree"],
        ),
    ]
    for title, items in sections:
        out += [f"**{title}:**", ""]
        for item in items or ["None."]:
            out += textwrap.wrap(
                item, 100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
            )
        out += [""]
    return "\n".join(out)


def splice(
    readme: str, block: str, name: str = "README.md", begin: str = BEGIN, end: str = END
) -> str:
    """`readme` with the text between the markers `begin` and `end` replaced by `block`."""
    if readme.count(begin) != 1 or readme.count(end) != 1:
        raise ResultsError(f"{name}: needs exactly one {begin} and one {end}")
    if readme.index(end) < readme.index(begin):
        raise ResultsError(f"{name}: {end} comes before {begin}")
    head, rest = readme.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{block}{end}{tail}"


def _target(path: Path, block: str, begin: str, end: str) -> tuple[Path, str, str]:
    """(path, its text now, its text with the block spliced in)."""
    if not path.is_file():
        raise ResultsError(f"{path}: missing")
    old = path.read_text()
    return path, old, splice(old, block, str(path), begin, end)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default="README.md", type=Path)
    ap.add_argument("--docs", type=Path, help="the departures page (docs/results.md by the README)")
    ap.add_argument("--measured", default="measured/paper_cpu", type=Path)
    ap.add_argument("--config", default="config.yaml", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; fail if it drifted")
    args = ap.parse_args(argv)
    docs = args.docs or args.readme.parent / "docs" / "results.md"
    from mbc.config import ConfigFileError, read_yaml

    try:
        read_yaml(args.config)  # a missing or broken config: one line, before any page
    except ConfigFileError as exc:
        print(f"mbc.readme_results: --config {exc}", file=sys.stderr)
        return 2
    for page in (args.readme, args.measured):
        if not page.exists():
            print(f"mbc.readme_results: {page}: no such file or directory", file=sys.stderr)
            return 2

    def link(page: Path) -> str:
        return Path(os.path.relpath(args.measured, page.resolve().parent)).as_posix()

    try:
        targets = [
            _target(args.readme, render(args.measured, args.config, link(args.readme)), BEGIN, END),
            _target(
                docs,
                render_departures(args.measured, args.config, link(docs)),
                DEPARTURES_BEGIN,
                DEPARTURES_END,
            ),
        ]
    except ResultsError as exc:
        print(f"mbc.readme_results: {exc}", file=sys.stderr)
        return 2
    running = args.readme.parent / "docs" / "running.md"  # where it exists (not in tests' trees)
    if running.is_file():
        try:
            block = render_cost(args.measured, link(running))
            targets.append(_target(running, block, COST_BEGIN, COST_END))
        except ResultsError as exc:
            print(f"mbc.readme_results: {exc}", file=sys.stderr)
            return 2
    drifted = [path for path, old, new in targets if new != old]
    if args.check:
        for path in drifted:
            print(
                f"mbc.readme_results: {path}'s generated block differs from "
                f"{args.measured}: run python -m mbc.readme_results",
                file=sys.stderr,
            )
        if drifted:
            return 1
        pages = ", ".join(str(path) for path, _, _ in targets)
        print(f"mbc.readme_results: {pages} match {args.measured}")
        return 0
    for path, old, new in targets:
        if new != old:
            write_text_atomic(path, new)
        print(f"mbc.readme_results: {path} {'updated' if new != old else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

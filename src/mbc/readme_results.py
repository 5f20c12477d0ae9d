"""The README's results block, generated from a committed measured report.

    python -m mbc.readme_results [--check] [--readme README.md] [--measured measured/paper_cpu]

rewrites what lies between `<!-- results:begin -->` and `<!-- results:end -->` in the README
from `scorecard.csv` and `hypotheses.csv` of the measured report (`mbc.measured`): the tally,
the scorecard rows with their rule and result, the seven verdicts beside the paper's, and a
warning when the report carries a `STALE` file. `--check` changes nothing and fails when the
block differs, so the README cannot drift from `measured/` (tests/test_readme_results.py).
The paper's verdicts are labelled references: hypotheses.csv's `paper_verdict` column, or for a
report collected before it had one, config's `hypotheses.<id>.paper_verdict.verdict`.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import textwrap
from pathlib import Path

import yaml

from mbc.core.artifacts import write_text_atomic

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
DASH = "–"


class ResultsError(ValueError):
    """A measured report or README the block cannot be made from (one line, naming the file)."""


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
        declared = (yaml.safe_load(config.read_text()) or {}).get("hypotheses") or {}
        for h in ids:
            found.setdefault(h, ((declared.get(h) or {}).get("paper_verdict") or {}).get("verdict"))
    lacking = [h for h in ids if not found.get(h)]
    if lacking:
        raise ResultsError(
            f"{config}: hypotheses.{lacking[0]}.paper_verdict.verdict is not declared "
            f"(the paper's verdict, a labelled reference)"
        )
    return found


def _provenance_runs(path: Path) -> str | None:
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith("runs: "):
                return line.split()[1]
    return None


def render(measured: Path, config: Path, link: str) -> str:
    """The block between the markers, from the report in `measured`; `link` is that folder
    as the README links it (relative to the README)."""
    card = _rows(
        measured / "scorecard.csv",
        (
            "claim",
            "measured",
            "ci_low",
            "ci_high",
            "n",
            "paper_reference",
            "tolerance",
            "agreement",
            "statistic",
            "ours_statistic",
            "ours_agreement",
            "reference_traced",
            "id",
        ),
    )
    hyp = _rows(measured / "hypotheses.csv", ("id", "mechanism", "verdict", "ours_verdict"))
    paper = _paper_verdicts(hyp, config)
    verdicts = {}  # one row per hypothesis: its tests' rows repeat the verdict
    for r in hyp:
        verdicts.setdefault(r["id"], r)
    papers_rows = [r for r in card if r["reference_traced"] != "ours"]
    our_rows = [r for r in card if r["reference_traced"] == "ours"]
    n_agree = sum(r["agreement"] == "agree" for r in papers_rows)
    n_ours = sum(r["agreement"] == "agree" for r in our_rows)
    differ = [h for h, r in verdicts.items() if r["verdict"] != paper[h]]
    n_match = len(verdicts) - len(differ)

    out: list[str] = []
    stale = measured / "STALE"
    if stale.is_file():
        reason = " ".join(stale.read_text().split()) or "no reason given"
        warning = _prose(
            f"**STALE: these results no longer match the configuration.** "
            f"[`{link}/STALE`]({link}/STALE) says: {reason}"
        )
        out += [f"> {line}" if line else "" for line in warning]
    runs = _provenance_runs(measured / "PROVENANCE")
    out += _prose(
        f"Measured by the `{measured.name}` preset"
        + (f" ({runs} runs)" if runs else "")
        + f"; the report: [`{link}/main.pdf`]({link}/main.pdf), how and where it was trained: "
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


def splice(readme: str, block: str, name: str = "README.md") -> str:
    """`readme` with the text between the markers replaced by `block`."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ResultsError(f"{name}: needs exactly one {BEGIN} and one {END}")
    if readme.index(END) < readme.index(BEGIN):
        raise ResultsError(f"{name}: {END} comes before {BEGIN}")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default="README.md", type=Path)
    ap.add_argument("--measured", default="measured/paper_cpu", type=Path)
    ap.add_argument("--config", default="config.yaml", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; fail if it drifted")
    args = ap.parse_args(argv)
    try:
        link = Path(os.path.relpath(args.measured, args.readme.resolve().parent)).as_posix()
        block = render(args.measured, args.config, link)
        if not args.readme.is_file():
            raise ResultsError(f"{args.readme}: missing")
        old = args.readme.read_text()
        new = splice(old, block, str(args.readme))
    except ResultsError as exc:
        print(f"mbc.readme_results: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != old:
            print(
                f"mbc.readme_results: {args.readme}'s results block differs from "
                f"{args.measured}: run python -m mbc.readme_results",
                file=sys.stderr,
            )
            return 1
        print(f"mbc.readme_results: {args.readme} matches {args.measured}")
        return 0
    if new != old:
        write_text_atomic(args.readme, new)
    print(f"mbc.readme_results: {args.readme} {'updated' if new != old else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

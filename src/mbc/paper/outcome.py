"""The report's outcome in words: the abstract's result, the explanations of every row and
verdict that differ from the paper's, and the conclusion, generated from scorecard.csv and
hypotheses.csv (LaTeX paragraphs, `\\input` by paper/main.tex). Nothing here is typed in:
counts, claims and verdicts come from the tables, the reasons from config (`explanation`).
"""

from __future__ import annotations

import pandas as pd

from mbc.paper.config_sections import CAUSES
from mbc.paper.latex import escape_latex
from mbc.paper.report import claims_with_match, value_with_ci
from mbc.paper.typeset import tex_text

# a sentence names at most this many claims or verdicts; more are counted and left to
# Section "Why the rest differs", which names them all
MAX_NAMED = 4


def paper_rows(card: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims (the scorecard's rows not traced to us); a table written before
    config had explanations reads as having none. A claim whose statistic is a glob has a
    row per match: its claim says which (`at D = 60`)."""
    rows = card[card.reference_traced != "ours"].reset_index(drop=True)
    for c in ("cause", "explanation"):
        rows[c] = rows[c].fillna("") if c in rows else ""
    rows["claim"] = claims_with_match(rows)
    return rows


def one_definition(card: pd.DataFrame) -> pd.Series:
    """Rows whose author's and our uniform statistics differ and reach different agreements."""
    return (card.ours_statistic != card.statistic) & ~card.robust_to_definition.astype(bool)


def _verdicts(hyp: pd.DataFrame) -> pd.DataFrame:
    """One row per hypothesis: id, verdict, paper_verdict ('' when config has none)."""
    first = hyp.drop_duplicates("id").reset_index(drop=True)
    for c in ("paper_verdict", "cause", "explanation"):
        first[c] = first[c].fillna("") if c in first else ""
    return first


def _list(items: list[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _how_many(n: int, agreement: str) -> str:
    """ "5 disagree", "1 disagrees", "2 are not measured", "1 is inconclusive"."""
    if agreement == "disagree":
        return f"{n} disagree{'s' if n == 1 else ''}"
    return f"{n} {'is' if n == 1 else 'are'} {escape_latex(agreement)}"


def _claim(row) -> str:
    return r"\emph{" + tex_text(row.claim) + "}"


def scorecard_sentence(card: pd.DataFrame) -> str:
    """How many of the paper's claims agree, and which do not."""
    rows = paper_rows(card)
    agree = rows.agreement == "agree"
    n_agree = int(agree.sum())
    text = (
        f"Of the paper's {len(rows)} headline claims, {n_agree} "
        f"{'agrees' if n_agree == 1 else 'agree'} with our measurement within their stated "
        "tolerances"
    )
    off = rows[~agree]
    if 0 < len(off) <= MAX_NAMED:
        parts = [f"{_claim(r)} ({escape_latex(r.agreement)})" for r in off.itertuples()]
        text += "; these do not: " + _list(parts)
    elif len(off):
        counts = off.agreement.value_counts()
        text += "; of the others, " + _list([_how_many(n, a) for a, n in counts.items()])
    one = rows[agree & one_definition(rows)]
    if len(one):
        text += (
            f". {len(one)} of those that agree {'does' if len(one) == 1 else 'do'} so only by the"
            " author's statistic, not by "
            "our uniform candidate-loss one"
        )
    return text + "."


def verdict_sentence(hyp: pd.DataFrame) -> str:
    """How many of our verdicts on H1-H7 match the paper's, and which differ."""
    v = _verdicts(hyp)
    # what the paper decides, counted as the paper does: "inconclusive" (H7) is no decision
    known = v[~v.paper_verdict.isin(["", "inconclusive"])]
    open_ = v[v.paper_verdict == "inconclusive"]
    if not len(known):
        return "The paper's own verdicts are not in this table."
    same = known[known.verdict == known.paper_verdict]
    differ = known[known.verdict != known.paper_verdict]
    text = (
        f"Our verdicts on the {len(v)} candidate mechanisms match the paper's for "
        f"{len(same)} of the {len(known)} it decides"
    )
    if len(same):
        text += f" ({_list(list(same.id))})"
    if len(differ):  # grouped: "H2 and H5 are not enough data where the paper says falsified"
        parts = []
        for (ours, paper), g in differ.groupby(["verdict", "paper_verdict"], sort=False):
            one = len(g) == 1
            verb = (
                ("has" if one else "have")
                if ours == "not enough data"
                else ("is" if one else "are")
            )
            parts.append(f"{_list(list(g.id))} {verb} {ours} where the paper says {paper}")
        text += "; " + _list(parts)
    if len(open_):
        text += "; the paper leaves " + _list(
            [f"{h.id} undecided (ours: {h.verdict})" for h in open_.itertuples()]
        )
    return escape_latex(text) + "."


def abstract(card: pd.DataFrame, hyp: pd.DataFrame) -> str:
    """The abstract's result: the scorecard and the verdicts, in two sentences."""
    return scorecard_sentence(card) + " " + verdict_sentence(hyp) + "\n"


def _cause(cause: str, text: str, measured: bool = True, scale_note: str = "") -> str:
    if not cause and not measured:
        return r"\textit{Not measured here: the statistic has no value at this preset's size.}"
    if not cause and scale_note:
        return ""  # said once, above the rows (config `report.scale_note`)
    if not cause:
        return r"\textit{No explanation is recorded in config.yaml for this row.}"
    text = text[:1].upper() + text[1:]
    return rf"\textit{{Cause: {CAUSES[cause]}.}} " + tex_text(text) + "."


def explanations(card: pd.DataFrame, hyp: pd.DataFrame, scale_note: str = "") -> str:
    """One paragraph per claim that disagrees or agrees under one definition only, and per
    verdict that differs from the paper's: the numbers, the rule and config's reason.
    `scale_note` (config `report.scale_note`): a preset too small to decide, said once
    above them in place of a missing cause under each."""
    rows = paper_rows(card)
    out = [rf"\textit{{{tex_text(scale_note)}.}}"] if scale_note else []
    for r in rows[(rows.agreement != "agree") | one_definition(rows)].itertuples():
        ours = value_with_ci(r.ours_measured, r.ours_ci_low, r.ours_ci_high)
        mine = value_with_ci(r.measured, r.ci_low, r.ci_high)
        if r.ours_statistic != r.statistic:
            how = (
                f"by the author's statistic {mine} ({escape_latex(r.agreement)}), by our "
                f"uniform one {ours} ({escape_latex(r.ours_agreement)})"
            )
        else:
            how = f"measured {mine} ({escape_latex(r.agreement)})"
        out.append(
            rf"\paragraph{{{tex_text(r.claim)}.}} Paper: {tex_text(r.paper_reference)}; rule: "
            f"{tex_text(r.tolerance)}; {how}. "
            + _cause(r.cause, r.explanation, r.agreement != "not measured", scale_note)
        )
    v = _verdicts(hyp)
    for h in v[(v.paper_verdict != "") & (v.verdict != v.paper_verdict)].itertuples():
        out.append(
            rf"\paragraph{{{h.id}, {tex_text(h.mechanism)}.}} Ours: {h.verdict}; the paper: "
            f"{h.paper_verdict}. " + _cause(h.cause, h.explanation, scale_note=scale_note)
        )
    if len(out) == bool(scale_note):
        return "Every claim agrees under both definitions and every verdict matches the paper's.\n"
    return "\n\n".join(out) + "\n"


def conclusion(card: pd.DataFrame, hyp: pd.DataFrame, robust: pd.DataFrame) -> str:
    """What reproduced, what did not and why (counted by cause), and our own claims."""
    rows = paper_rows(card)
    off = rows[rows.agreement != "agree"]
    v = _verdicts(hyp)
    known = v[v.paper_verdict != ""]
    differ = known[known.verdict != known.paper_verdict]
    text = [scorecard_sentence(card), verdict_sentence(hyp)]
    causes = pd.Series([*off.cause, *differ.cause], dtype=str)
    known = causes[causes != ""].value_counts()
    if len(known):
        words = [f"{n} to {CAUSES[c]}" for c, n in known.items()]
        text.append(f"Of the {len(causes)} differences, we attribute {_list(words)}.")
    if (causes == "").any():
        n = int((causes == "").sum())
        text.append(f"{n} {'has' if n == 1 else 'have'} no cause recorded in config.yaml.")
    failures = [*off[off.cause == "failure"].claim]
    if 0 < len(failures) <= MAX_NAMED:
        are = (
            "The claim we fail to reproduce is "
            if len(failures) == 1
            else "The claims we fail to reproduce are "
        )
        text.append(are + _list([r"\emph{" + tex_text(c) + "}" for c in failures]) + ".")
    first = robust.drop_duplicates("id") if len(robust) else robust
    if len(first):
        n_sup = int((first.verdict == "supported").sum())
        text.append(
            f"Beyond the paper, {n_sup} of our {len(first)} pre-registered statements on the "
            "initialisation scale are supported (Section~\\ref{sec:init})."
        )
    return " ".join(text) + "\n"

"""Plain config text (claims, rules, statistic labels) typeset as LaTeX for the report.

config.yaml writes its prose in ASCII ("tau grows as D^1.2", ">= 80%", "(B,z)->A",
"within x2"); the tables print it in LaTeX ($\\tau$, $D^{1.2}$, $\\ge$, $\\to$, $\\times 2$).
Everything that is not one of the patterns below is escaped (`mbc.paper.latex.escape_latex`).
"""

from __future__ import annotations

import re

from mbc.paper.latex import escape_latex

# (pattern, its LaTeX: a string, or a function of the match's groups), tried left to
# right at each position; the first that matches wins
_RULES: tuple[tuple[str, object], ...] = (
    (r"\(B, ?z\)", r"$(B, z)$"),
    (r"\(A, ?z\)", r"$(A, z)$"),
    (r"->", r"$\to$"),
    (r">=", r"$\ge$"),
    (r"<=", r"$\le$"),
    (r"\+/-", r"$\pm$"),
    (r"~(?=\w)", "about "),
    (r"\|Spearman rho\|", r"$|\rho|$ (Spearman)"),
    (r"\|lambda_max / lambda_min\|", r"$|\lambda_{\max} / \lambda_{\min}|$"),
    (r"\bSpearman rho\b", r"Spearman $\rho$"),
    (r"\b([A-Za-z])\^([0-9.]*[0-9])", lambda b, e: f"${b}^{{{e}}}$"),  # D^1.2, R^2
    (r"\b([0-9]+(?:\.[0-9]+)?)x-([0-9]+(?:\.[0-9]+)?)x\b", lambda a, b: rf"{a}--{b}$\times$"),
    (r"(?<![\w.])x([0-9]+(?:\.[0-9]+)?)\b", lambda f: rf"$\times${f}"),  # within x2
    (r"\b([0-9]+(?:\.[0-9]+)?)x\b", lambda f: rf"{f}$\times$"),  # 3.6x
    (r"\b([0-9]+(?:\.[0-9]+)?)-([0-9]+(?:\.[0-9]+)?)\b", lambda a, b: f"{a}--{b}"),  # 500-1000
    (r"\blog K\b", r"$\log K$"),
    (r"\btau/2\b", r"$\tau/2$"),
    (r"\btau\b", r"$\tau$"),
    (r"\blambda_(min|max)\b", lambda e: rf"$\lambda_{{\{e}}}$"),
    (r"\bL_cand\b", r"$L_\mathrm{cand}$"),
    (r"\bdelta_z\b", r"$\Delta z$"),
    (r"\bbeta\b", r"$\beta$"),
    (r"\bn_groups\b", r"$n_\mathrm{groups}$"),
    (r"\be_([Bz])\b", lambda v: f"$e_{v}$"),  # the linear baseline's one-hot inputs
    (r"\b([DKz])\b", lambda v: f"${v}$"),  # a symbol of the paper: D, K, z
    (r"(?<![^ ])> (?=[0-9])", "$>$ "),
    (r"(?<![^ ])< (?=[0-9])", "$<$ "),
)
_PATTERN = re.compile("|".join(f"(?P<r{i}>{p})" for i, (p, _) in enumerate(_RULES)))


def tex_text(text: str) -> str:
    """`text` as LaTeX: the patterns of `_RULES` typeset, everything else escaped."""
    out, pos = [], 0
    for m in _PATTERN.finditer(str(text)):
        i = next(j for j in range(len(_RULES)) if m.group(f"r{j}") is not None)
        pattern, latex = _RULES[i]
        out.append(escape_latex(text[pos : m.start()]))
        out.append(latex(*re.fullmatch(pattern, m.group(0)).groups()) if callable(latex) else latex)
        pos = m.end()
    out.append(escape_latex(text[pos:]))
    return "".join(out)

"""LaTeX rendering for the report: tables, macro names and the generated numbers file.

Pure functions that return strings; callers write them (``mbc.core.artifacts.write_text_atomic``).
Nothing here imports Snakemake or touches the filesystem.

- :func:`escape_latex` escapes the ten characters special to LaTeX.
- :func:`format_number` renders a number for text *or* math mode (minus signs and
  scientific notation go through ``\\ensuremath``); NaN/None become a placeholder.
- :func:`booktabs_table` renders a DataFrame as a complete ``table`` environment.
- :func:`macro_name` / :func:`macro_names` turn keys such as ``("fit", "tau_vs_d",
  "exponent")`` into macro names (``FitTauVsDExponent``), spelling digits as words.
- :func:`numbers_tex` renders a file of ``\\newcommand`` lines, one per number.

Wrap a string in :class:`Raw` to pass LaTeX through unescaped (a header such as
``Raw(r"$\\tau$")``, a note with math).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "EN_DASH",
    "NA_VALUE",
    "RESERVED_MACROS",
    "Raw",
    "booktabs_table",
    "escape_latex",
    "format_number",
    "is_missing",
    "macro_name",
    "macro_names",
    "numbers_tex",
]

#: What a missing cell shows in a table.
EN_DASH = "--"
#: What a missing value expands to in ``numbers.tex``.
NA_VALUE = r"\textit{n/a}"

_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",  # OT1 prints a bare | as an em dash
}

_DIGIT_WORDS = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine")

#: Capitalised control sequences that LaTeX, its standard classes, booktabs, graphicx or
#: hyperref already define; a generated macro must not shadow them.
_RESERVED_TEXT = """
    AA AE Alph Arrowvert Bbbk Big Bigg Biggl Biggm Biggr Bigl Bigm Bigr Box Cap Cup Delta
    Diamond Downarrow Finv Game Gamma H Huge Im Join L LARGE LaTeX LaTeXe Lambda Large
    Leftarrow Leftrightarrow Longleftarrow Longleftrightarrow Longrightarrow O OE Omega P
    Phi Pi Pr Psi Re Rightarrow Roman S Sigma TeX Theta Uparrow Updownarrow Upsilon Vert
    Xi AtBeginDocument AtEndDocument AtBeginDvi AtEndOfClass AtEndOfPackage
    ClassError ClassInfo ClassWarning DeclareOption ExecuteOptions GenericError
    GenericInfo GenericWarning IfFileExists InputIfFileExists LoadClass NeedsTeXFormat
    PackageError PackageInfo PackageWarning PassOptionsToClass PassOptionsToPackage
    ProcessOptions ProvidesClass ProvidesFile ProvidesPackage RequirePackage
    Gin Url Hy Acrobatmenu CheckBox ChoiceMenu Form Gauge HTML Hyperlink ListBox
    PushButton Radio Reset Submit TextField MessageBreak
    """
RESERVED_MACROS = frozenset(_RESERVED_TEXT.split())

_LABEL_RE = re.compile(r"[A-Za-z0-9:_.\-/+]+")
_SCI_RE = re.compile(r"([+-]?)(\d+(?:\.\d*)?)e([+-])(\d+)")
_MACRO_RE = re.compile(r"[A-Za-z]+")


class Raw(str):
    """A string that is already LaTeX: passed through without escaping."""

    __slots__ = ()


def escape_latex(text: Any) -> str:
    """Escape the characters special to LaTeX; :class:`Raw` passes through.

    Newlines and tabs become spaces so that the result is safe inside a table cell or
    on a single ``\\newcommand`` line.
    """
    if isinstance(text, Raw):
        return str(text)
    s = str(text)
    out = "".join(_ESCAPES.get(ch, ch) for ch in s)
    return re.sub(r"[\r\n\t]+", " ", out)


def is_missing(value: Any) -> bool:
    """None, pandas' NA/NaT or a NaN number: printed as an en dash."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral):
        return math.isnan(float(value))
    return False


def _apply_spec(value: Any, spec: str | None) -> str:
    if spec is None:
        if isinstance(value, numbers.Integral):
            return str(int(value))
        # Integral floats (a step count in a column that has NaN) print as integers.
        if float(value).is_integer() and abs(float(value)) < 1e7:
            return str(int(value))
        return format(float(value), ".3g")
    if "{" in spec:
        return spec.format(value)
    return format(value, spec)


# A magnitude below this prints as 0: float rounding of a difference that is exactly zero
ZERO_BELOW = 1e-12


def format_number(value: Any, spec: str | None = None, *, missing: str = EN_DASH) -> str:
    """Render a number as LaTeX that works in text and in math mode.

    ``spec`` is a ``format`` spec (``".3f"``) or a ``str.format`` template
    (``"{:.1f}x"``). Integers (and integral floats below 1e7) default to plain digits,
    other floats to ``.3g``. A minus
    sign becomes ``\\ensuremath{-}``; Python scientific notation (``1.2e-05``) becomes
    ``\\ensuremath{1.2\\times 10^{-5}}``; infinities become ``\\ensuremath{\\infty}``;
    NaN and None become ``missing``; booleans become ``yes``/``no``. Other characters
    of the formatted text (``%`` of a ``"%"`` spec, a template's words) are escaped.
    """
    if is_missing(value):
        return missing
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if not isinstance(value, numbers.Number):
        raise TypeError(f"format_number expects a number, got {type(value).__name__}")
    if isinstance(value, numbers.Real) and math.isinf(float(value)):
        return r"\ensuremath{-\infty}" if float(value) < 0 else r"\ensuremath{\infty}"
    if isinstance(value, numbers.Real) and 0 < abs(float(value)) < ZERO_BELOW:
        value = 0.0  # rounding residue (-4.48e-16 where the value is 0) reads as 0
    text = _apply_spec(value, spec)
    m = _SCI_RE.fullmatch(text)
    if m:
        sign, mantissa, esign, exponent = m.groups()
        exp = int(exponent)
        sign = "-" if sign == "-" else ""
        esign = "-" if esign == "-" and exp != 0 else ""
        return rf"\ensuremath{{{sign}{mantissa}\times 10^{{{esign}{exp}}}}}"
    out = escape_latex(text)
    # A hyphen typeset as a minus sign; works both in text and in math mode.
    return out.replace("-", r"\ensuremath{-}")


def _render_cell(value: Any, spec: str | None, latex: bool = False) -> str:
    if is_missing(value):
        return EN_DASH
    if latex:  # a column declared LaTeX (never a str subclass: pandas may drop it)
        return str(value)
    if isinstance(value, bool | np.bool_ | numbers.Number):
        return format_number(value, spec)
    if spec is not None:
        return escape_latex(spec.format(value) if "{" in spec else format(value, spec))
    return escape_latex(value)


def booktabs_table(
    df: pd.DataFrame,
    *,
    caption: str,
    label: str,
    columns: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
    notes: str | None = None,
    align: str | None = None,
    size: str | None = "small",
    placement: str = "htbp",
    latex_cells: tuple[str, ...] | list[str] = (),
) -> str:
    """Render ``df`` as a complete ``table`` environment with booktabs rules.

    ``columns`` maps DataFrame column -> header text and selects/orders the columns
    (default: all columns, headed by their names). ``formats`` maps column -> number
    format (see :func:`format_number`). Headers, the caption and the notes are escaped
    unless they are :class:`Raw`; cells are escaped except in the columns `latex_cells`
    (declared by name: a str subclass in a cell does not survive pandas' string dtypes). NaN/None cells show an en dash. The index is
    ignored (call ``reset_index`` to keep it). Numeric columns are right-aligned, the
    rest left-aligned, unless ``align`` gives the full column spec (``"lrr"``).
    ``size`` is a font-size command name without backslash (``None`` for none).
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError("booktabs_table expects a pandas DataFrame")
    if not _LABEL_RE.fullmatch(label):
        raise ValueError(f"invalid LaTeX label {label!r}")
    columns = dict(columns) if columns is not None else {str(c): str(c) for c in df.columns}
    formats = dict(formats or {})
    names = [str(c) for c in df.columns]
    missing = [c for c in columns if c not in names]
    if missing:
        raise KeyError(f"columns not in the table: {missing}")
    unknown = [c for c in [*formats, *latex_cells] if c not in columns]
    if unknown:
        raise KeyError(f"formats or latex_cells given for columns that are not shown: {unknown}")
    if not columns:
        raise ValueError("booktabs_table needs at least one column")
    if len(set(names)) != len(names):
        raise ValueError("DataFrame has duplicate column names")
    if size is not None and not _MACRO_RE.fullmatch(size):
        raise ValueError(f"invalid size command {size!r}")

    frame = df.copy()
    frame.columns = names
    keys = list(columns)
    if align is None:
        align = "".join(
            "r"
            if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
            else "l"
            for c in keys
        )
    elif len(re.sub(r"[^lcrpmbX]", "", align)) < len(keys):
        raise ValueError(f"align {align!r} has fewer columns than the {len(keys)} shown")

    lines = [
        rf"\begin{{table}}[{placement}]",
        r"\centering",
    ]
    if size is not None:
        lines.append(f"\\{size}")
    lines += [
        rf"\caption{{{escape_latex(caption)}}}",
        rf"\label{{{label}}}",
        # measured in a box and shrunk to the text width only if wider (graphicx)
        r"\makeatletter\@ifundefined{mbcfitbox}{\newsavebox{\mbcfitbox}}{}\makeatother",
        r"\sbox{\mbcfitbox}{%",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(escape_latex(columns[c]) for c in keys) + r" \\",
        r"\midrule",
    ]
    if len(frame) == 0:
        lines.append(rf"\multicolumn{{{len(keys)}}}{{c}}{{\textit{{no data}}}} \\")
    for row in frame[keys].itertuples(index=False, name=None):
        cells = [
            _render_cell(v, formats.get(c), c in latex_cells)
            for c, v in zip(keys, row, strict=True)
        ]
        lines.append(" & ".join(cells) + r" \\")
    lines += [
        r"\bottomrule",
        r"\end{tabular}}%",
        r"\ifdim\wd\mbcfitbox>\linewidth\resizebox{\linewidth}{!}{\usebox{\mbcfitbox}}%",
        r"\else\usebox{\mbcfitbox}\fi",
    ]
    if notes:
        lines += [r"\par\smallskip", rf"{{\footnotesize {escape_latex(notes)}\par}}"]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _words(part: str) -> list[str]:
    if not part.isascii():
        raise ValueError(f"macro name part {part!r} is not ASCII")
    words: list[str] = []
    for chunk in re.split(r"[^A-Za-z0-9]+", part):
        for token in re.findall(r"[A-Za-z]+|[0-9]", chunk):
            if token.isdigit():
                words.append(_DIGIT_WORDS[int(token)])
            else:
                words.append(token[0].upper() + token[1:])
    return words


def macro_name(*parts: Any) -> str:
    """Build a letters-only LaTeX macro name from ``parts``.

    Each part is split at non-alphanumeric characters; each word is capitalised
    (the rest of the word is kept, so an existing CamelCase name maps to itself);
    every digit is spelled as a word: ``("fit", "tau_vs_d", "exponent")`` ->
    ``FitTauVsDExponent``, ``"k5"`` -> ``KFive``, ``"h10"`` -> ``HOneZero``. A part may
    be a tuple/list of parts. Raises ValueError for an empty result, non-ASCII text or a
    name that LaTeX already defines (:data:`RESERVED_MACROS`).
    """
    words: list[str] = []
    for part in parts:
        if isinstance(part, tuple | list):
            words.extend(_words_of_many(part))
        elif isinstance(part, bool) or part is None:
            raise ValueError(f"invalid macro name part {part!r}")
        else:
            words.extend(_words(str(part)))
    name = "".join(words)
    if not name:
        raise ValueError(f"macro name from {parts!r} is empty")
    assert _MACRO_RE.fullmatch(name), name
    if name in RESERVED_MACROS:
        raise ValueError(f"macro name {name!r} (from {parts!r}) is already defined by LaTeX")
    return name


def _words_of_many(parts: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for p in parts:
        out.extend(_words(str(p)))
    return out


def _key_to_name(key: Hashable) -> str:
    if isinstance(key, tuple):
        return macro_name(*key)
    text = str(key)
    if text.startswith("\\"):
        text = text[1:]
    return macro_name(text)


def macro_names(keys: Iterable[Hashable]) -> dict[Hashable, str]:
    """Map each key (a string or a tuple of parts) to its macro name.

    Raises ValueError when two different keys give the same name (``"k5"`` and
    ``"k_5"`` both give ``KFive``), naming both keys.
    """
    out: dict[Hashable, str] = {}
    seen: dict[str, Hashable] = {}
    for key in keys:
        name = _key_to_name(key)
        if name in seen and seen[name] != key:
            raise ValueError(f"macro name collision: {seen[name]!r} and {key!r} both give \\{name}")
        seen[name] = key
        out[key] = name
    return out


def _check_braces(text: str, name: str) -> None:
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                break
        i += 1
    if depth != 0:
        raise ValueError(f"value of \\{name} has unbalanced braces: {text!r}")


def _render_value(value: Any, spec: str | None) -> str:
    if is_missing(value):
        return NA_VALUE
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, str):
        return escape_latex(value)
    if isinstance(value, bool | np.bool_ | numbers.Number):
        return format_number(value, spec, missing=NA_VALUE)
    raise TypeError(f"unsupported value type {type(value).__name__}: {value!r}")


def numbers_tex(
    values: Mapping[Hashable, float | int | str | None],
    *,
    fmt: Mapping[Hashable, str] | None = None,
    source: str | None = None,
) -> str:
    """Render ``values`` as a file of ``\\newcommand{\\Name}{value}`` lines.

    Keys are macro names (``"FitTauVsDExponent"``, optionally with a leading
    backslash) or anything :func:`macro_name` accepts (``"fit_tau_vs_d_exponent"``, a
    tuple of parts); all are normalised and validated, and a collision raises
    ValueError. Lines are sorted by name. Missing values (None, NaN) expand to
    ``\\textit{n/a}``; strings are escaped (unless :class:`Raw`); numbers are
    formatted with ``fmt[key]`` (keyed like ``values``) or the default of
    :func:`format_number`. ``source`` is named in the header comment.
    """
    fmt = dict(fmt or {})
    names = macro_names(values)
    stray = [k for k in fmt if k not in names]
    if stray:
        raise KeyError(f"fmt given for keys that have no value: {stray}")
    rendered: dict[str, str] = {}
    for key, value in values.items():
        name = names[key]
        text = _render_value(value, fmt.get(key))
        if "\n" in text or "\r" in text:
            raise ValueError(f"value of \\{name} spans several lines")
        _check_braces(text, name)
        rendered[name] = text
    header = [
        "% Generated by mbc.paper.latex.numbers_tex -- do not edit by hand.",
    ]
    if source:
        header.append(f"% Source: {' '.join(str(source).split())}")
    header.append("% Every number quoted in the report prose is one of these macros.")
    body = [f"\\newcommand{{\\{name}}}{{{rendered[name]}}}" for name in sorted(rendered)]
    return "\n".join(header + body) + "\n"

"""The in-repository method document and the README's module table stay true to the code."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHOD = ROOT / "docs" / "method.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def test_every_method_anchor_named_in_the_code_exists():
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", METHOD.read_text(), flags=re.M)}
    sources = [*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("workflow/**/*"),
               ROOT / "README.md", ROOT / "Snakefile", ROOT / "config.yaml"]  # fmt: skip
    named = {}
    for path in sources:
        if path.is_file():
            for anchor in re.findall(r"method\.md#([\w-]+)", path.read_text(errors="replace")):
                named.setdefault(anchor, path.relative_to(ROOT))
    assert named, "no docs/method.md anchors found: the pattern is wrong"
    missing = {a: str(p) for a, p in named.items() if a not in anchors}
    assert not missing, f"anchors named but not in docs/method.md: {missing}"


def test_readme_module_table_covers_every_module():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| module |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(mbc(?:\.\w+)+)`", table))
    modules = set()
    for path in (ROOT / "src" / "mbc").rglob("*.py"):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        modules.add(".".join(parts))
    # a row may name a package for all its modules (mbc.paper.figures)
    covered = {m for m in modules if any(m == x or m.startswith(x + ".") for x in listed)}
    assert modules - covered == set(), f"modules missing from README's table: {modules - covered}"


def test_modules_are_small_and_do_not_shadow_the_standard_library():
    """The architecture's two size/naming rules (README: How it fits together)."""
    import sys

    modules = [p for p in (ROOT / "src" / "mbc").rglob("*.py")]
    shadowing = [str(p) for p in modules if p.stem in sys.stdlib_module_names]
    assert not shadowing, shadowing
    long = {str(p.relative_to(ROOT)): n for p in modules
            if (n := len(p.read_text().splitlines())) > 500}  # fmt: skip
    assert not long, long

"""The README and the pages under docs/ stay true to the code and to each other: the method
document's anchors, the architecture page's module table, links that resolve, a short README."""

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
    sources = [
        *ROOT.glob("src/**/*.py"),
        *ROOT.glob("tests/*.py"),
        *ROOT.glob("workflow/**/*"),
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        ROOT / "Snakefile",
        ROOT / "config.yaml",
    ]
    named = {}
    for path in sources:
        if path.is_file():
            for anchor in re.findall(r"method\.md#([\w-]+)", path.read_text(errors="replace")):
                named.setdefault(anchor, path.relative_to(ROOT))
    assert named, "no docs/method.md anchors found: the pattern is wrong"
    missing = {a: str(p) for a, p in named.items() if a not in anchors}
    assert not missing, f"anchors named but not in docs/method.md: {missing}"


def test_architecture_module_table_covers_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page.split("| module |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(mbc(?:\.\w+)+)`", table))
    modules = set()
    for path in (ROOT / "src" / "mbc").rglob("*.py"):
        parts = path.relative_to(ROOT / "src").with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        modules.add(".".join(parts))
    # a row may name a package for all its modules (mbc.paper.figures)
    covered = {m for m in modules if any(m == x or m.startswith(x + ".") for x in listed)}
    missing = modules - covered
    assert missing == set(), f"modules missing from docs/architecture.md's table: {missing}"


def test_modules_are_small_and_do_not_shadow_the_standard_library():
    """The architecture's two size/naming rules (docs/architecture.md)."""
    import sys

    modules = [p for p in (ROOT / "src" / "mbc").rglob("*.py")]
    shadowing = [str(p) for p in modules if p.stem in sys.stdlib_module_names]
    assert not shadowing, shadowing
    long = {
        str(p.relative_to(ROOT)): n for p in modules if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, long


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(path: Path) -> str:
    """A page without its fenced code blocks (commands there are not links)."""
    return re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists() or ROOT not in file.parents:
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md":
                anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", _prose(file), flags=re.M)}
                if anchor not in anchors:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 220
    for command in (
        "bash setup.sh && .venv/bin/snakemake --cores 8 all",
        "bash setup.sh && .venv/bin/pytest",
        ".venv/bin/snakemake --cores 2 all --config preset=smoke",
        "--config preset=paper_cpu",
        "--profile slurm",
    ):
        assert command in readme, command
    sections = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert sections[:2] == ["What it found", "Quick start"], sections
    pages = ["results", "running", "gpu-and-slurm", "performance", "reliability", "architecture"]
    for page in [*pages, "method"]:
        assert f"(docs/{page}.md" in readme, page


def test_docs_stay_inside_the_repository_and_quote_no_commits():
    """A clone has nothing outside the repository, and a commit is quoted only through
    measured/ (PROVENANCE), where mbc.measured writes it."""
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page.name
        hashes = [
            h
            for h in re.findall(r"\b[0-9a-f]{7,40}\b", text)
            if re.search(r"[a-f]", h) and re.search(r"[0-9]", h)
        ]
        assert not hashes, (page.name, hashes)


def test_table_cells_are_short():
    """A table is for scanning: prose longer than a cell belongs under the table."""
    long = []
    for page in PAGES:
        for n, line in enumerate(_prose(page).splitlines(), 1):
            if line.lstrip().startswith("|"):
                long += [
                    f"{page.name}:{n}: {c[:40]}..."
                    for c in re.split(r"(?<!\\)\|", line)
                    if len(c.strip()) > 120
                ]
    assert not long, long

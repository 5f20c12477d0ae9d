"""Imports point down: each package of `mbc` imports only its own modules and the layers
below it, and nothing imports a command-line module (one run as `python -m`). Loading the
config (every Snakemake start-up) imports no scipy."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
# mbc.<package> -> its layer; a module may import from a lower layer or its own package.
# machine reads the hardware and imports nothing of mbc (core's `auto` arithmetic asks it).
# diagnostics reads trained models (training); analysis reads the diagnostics' tables
# (through core's columns); the paper and the planning read what is below them, not each
# other. The Snakemake-facing machinery (workflow) reads only core but sits above the layers:
# none of them may lean on Snakemake. Top-level modules (mbc.runs_pipeline, mbc.config, the
# commands) sit above all of them.
LAYERS = {
    "machine": 0, "core": 1, "training": 2, "diagnostics": 3, "analysis": 4, "paper": 5,
    "planning": 5, "workflow": 6,
}  # fmt: skip
TOP = max(LAYERS.values()) + 1


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package(module: str) -> str:
    """`mbc.core.spec` -> core; a top-level module (mbc.runs_pipeline, mbc.config...) -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def layer(module: str) -> int:
    """The package root `mbc` (its `__file__`, the version) is below everything."""
    return -1 if module == "mbc" else LAYERS.get(package(module), TOP)


def is_module(name: str) -> bool:
    path = SRC / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every `mbc` import, those inside functions included; `from mbc.x
    import y` names mbc.x.y where y is a module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "mbc"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mbc":
            assert node.level == 0, f"line {node.lineno}: a relative import"
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, sub if is_module(sub) else node.module))
    return out


def is_command(tree: ast.Module, name: str) -> bool:
    """Run as `python -m`: a `__main__` module or one with an `if __name__ == "__main__"`."""
    guard = re.compile(r"__name__\s*==\s*['\"]__main__['\"]")
    return name.endswith("__main__") or any(
        isinstance(n, ast.If) and guard.fullmatch(ast.unparse(n.test)) for n in tree.body
    )


def parsed() -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(p): (p, ast.parse(p.read_text(), str(p))) for p in SRC.rglob("*.py")}


def problems(modules: dict[str, tuple[Path, ast.Module]]) -> list[str]:
    commands = {name for name, (_, tree) in modules.items() if is_command(tree, name)}
    out = []
    for name, (path, tree) in sorted(modules.items()):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for line, imported in imports(tree):
            if imported in commands and imported != name:
                out.append(f"{where}:{line}: imports the command-line module {imported}")
            own = package(imported) == package(name)
            if not own and layer(imported) >= layer(name):
                out.append(
                    f"{where}:{line}: {name} (layer {layer(name)}) imports {imported} "
                    f"(layer {layer(imported)}): imports must point down"
                )
    return out


def test_every_package_has_a_layer():
    packages = {p.name for p in (SRC / "mbc").iterdir() if (p / "__init__.py").exists()}
    assert packages - {"config"} == set(LAYERS), "a new package needs its place in LAYERS"


def test_imports_point_down_and_never_at_a_command():
    assert problems(parsed()) == []


def test_the_workflow_imports_no_command_line_module():
    """Rule scripts and rule files are entry points too: they may import any layer, but no
    command (its module-level work and imports are the command's)."""
    commands = {n for n, (_, tree) in parsed().items() if is_command(tree, n)}
    assert {"mbc.estimate", "mbc.status", "mbc.measured", "mbc.config.__main__"} <= commands
    found = []
    for path in [
        ROOT / "Snakefile",
        *(ROOT / "workflow").rglob("*.smk"),
        *(ROOT / "workflow").rglob("*.py"),
    ]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*(?:from|import)\s+(mbc[\w.]*)", line)
            if m and m[1] in commands:
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert found == []


def test_the_check_finds_an_upward_import_and_a_command_import(tmp_path):
    """The checker itself: a core module importing the analysis, and a planning module
    importing `mbc.estimate`, are both reported with their file and line."""
    fake = {
        "mbc.core.fake": (
            tmp_path / "fake.py",
            ast.parse("import os\nfrom mbc.analysis import stats\n"),
        ),
        "mbc.planning.fake": (
            tmp_path / "p.py",
            ast.parse("def f():\n    from mbc.estimate import x\n"),
        ),
        "mbc.estimate": (tmp_path / "e.py", ast.parse("if __name__ == '__main__':\n    pass\n")),
    }
    found = problems(fake)
    assert any("fake.py:2: mbc.core.fake (layer 1) imports mbc.analysis.stats" in p for p in found)
    assert any("p.py:2: imports the command-line module mbc.estimate" in p for p in found)
    assert any(
        f"p.py:2: mbc.planning.fake (layer 5) imports mbc.estimate (layer {TOP})" in p
        for p in found
    )


def test_the_workflow_machinery_reads_only_core_and_nothing_below_imports_it():
    """`mbc.workflow` (start-up repair, outdir hold, console, a job's log) binds Snakemake to
    the domain: it reads `mbc.core` only, and `mbc.core` never reads Snakemake."""
    modules = parsed()
    upward = [
        f"{name}:{line}: {imported}"
        for name, (_, tree) in modules.items()
        if package(name) == "workflow"
        for line, imported in imports(tree)
        if package(imported) not in {"core", "workflow"}
    ]
    assert upward == []
    snakemake_in_core = [
        name
        for name, (path, _) in modules.items()
        if package(name) == "core"
        and re.search(r"^\s*(from|import) snakemake", path.read_text(), re.M)
    ]
    assert snakemake_in_core == []


def test_loading_the_paper_config_imports_no_scipy():
    """`mbc.config.load` runs at every Snakemake start-up: the statistics' and figures'
    schema parts come from declarations (`mbc.analysis.stat_schema`, `mbc.paper.figure_tables`),
    not from the modules that compute and draw."""
    code = (
        "import sys, mbc.config as c; cfg = c.load(c.read_yaml('config.yaml'));"
        "print(cfg.preset, sorted({m.split('.')[0] for m in sys.modules}"
        " & {'scipy', 'pandas', 'matplotlib'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["paper", "[]"], out.stdout


def test_the_untimed_banner_of_the_paper_preset_imports_no_torch(tmp_path):
    """What every `snakemake` start-up (`-n` included) prints before its DAG plans with the
    step schedules only: torch (seconds to import) comes in where something trains or is
    timed, or where a GPU driver is (to ask CUDA)."""
    code = (
        "import sys, mbc.config as c, mbc.planning.banner as b;"
        f"cfg = c.load(c.read_yaml('config.yaml'), {{'outdir': {str(tmp_path)!r}}});"
        "lines = b.banner_lines(cfg, cores=2, measure=False, dry_run=True);"
        "print(len(lines) > 2, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    nvidia = Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists()
    assert out.stdout.split() == ["True", str(nvidia)], out.stdout

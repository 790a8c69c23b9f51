"""Dependencies point one way: cli.py -> trainers/ -> heterofold_hub/. The CLI and the trainers are installed
inside the package, as ``heterofold_hub.cli`` and ``heterofold_hub.trainers`` (symlinks to the root's ``cli.py``
and ``trainers/`` in a checkout: docs/packaging.md), yet the library, the rest of heterofold_hub, never imports
them, under either name."""

import ast
import subprocess
import sys

from helpers import ROOT

APP = ("heterofold_hub.cli", "heterofold_hub.trainers")  # inside the package, not part of the library


def is_app(module: str) -> bool:
    return module.split(".")[0] in ("trainers", "cli") or any(module == a or module.startswith(a + ".") for a in APP)


def imported_names(node: ast.AST, package: list[str]) -> list[str]:
    """Absolute names an import statement may load (``from X import y`` may load module X.y)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = package[:len(package) - node.level + 1] if node.level else []  # `from ..x import y`
    module = ".".join(base + ([node.module] if node.module else []))
    return [module, *(f"{module}.{a.name}" for a in node.names)]


def test_the_library_never_imports_the_trainer_or_the_cli():
    library = [p for p in sorted((ROOT / "heterofold_hub").rglob("*.py"))
               if not is_app(".".join(p.relative_to(ROOT).with_suffix("").parts))]
    assert ROOT / "heterofold_hub" / "hub" / "registry.py" in library
    assert ROOT / "heterofold_hub" / "cli.py" not in library
    offenders = []
    for path in library:
        package = list(path.relative_to(ROOT).parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in imported_names(node, package)
                          if is_app(name)]
    assert offenders == []


def test_importing_every_library_module_loads_no_trainer_module():
    code = (f"import importlib, pkgutil, sys\nAPP = {APP!r}\n"
            "def walk(path, prefix):\n"
            "    for m in pkgutil.iter_modules(path, prefix):\n"
            "        if m.name not in APP:\n"
            "            module = importlib.import_module(m.name)\n"
            "            if m.ispkg: walk(module.__path__, m.name + '.')\n"
            "walk(importlib.import_module('heterofold_hub').__path__, 'heterofold_hub.')\n"
            "print(len(sys.modules), sorted(n for n in sys.modules\n"
            "                               if n.split('.')[0] in ('trainers', 'cli', 'lightning') or n.startswith(APP)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    loaded, app_modules = run.stdout.strip().split(" ", 1)
    assert app_modules == "[]" and int(loaded) > 100  # the walk really imported the library


def test_tests_scripts_and_benchmarks_import_the_cli_and_trainers_by_their_package_names():
    """`import trainers` or `import cli` from the repository root still works, but beside heterofold_hub.trainers it
    would be a second copy of every module, whose classes fail isinstance checks against the first's."""
    users = [p for folder in ("tests", "benchmarks", "scripts", "docs") for p in sorted((ROOT / folder).rglob("*.py"))]
    bare = [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for path in users
            for node in ast.walk(ast.parse(path.read_text())) for name in imported_names(node, [])
            if name.split(".")[0] in ("trainers", "cli")]
    assert bare == []

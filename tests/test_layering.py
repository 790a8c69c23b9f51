"""Dependencies point one way: cli.py -> trainers/ -> heterofold_hub/. The library never imports the trainer."""

import ast
import subprocess
import sys

from helpers import ROOT


def test_the_library_never_imports_the_trainer():
    offenders = []
    for path in sorted((ROOT / "heterofold_hub").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] in ("trainers", "cli")]
    assert offenders == []


def test_importing_every_library_module_loads_no_trainer_module():
    code = ("import importlib, pkgutil, sys, heterofold_hub\n"
            "for m in pkgutil.walk_packages(heterofold_hub.__path__, 'heterofold_hub.'): importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('trainers', 'cli', 'lightning')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"

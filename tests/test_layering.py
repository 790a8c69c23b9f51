"""Dependencies point one way. cli.py -> trainers/ -> heterofold_hub/, and inside the library each subpackage
imports only the layers below it (docs/design.md, "Layers"). Every import counts, also one inside a function:
a late import hides an edge from a reader but not from this test."""

import ast
import subprocess
import sys

from helpers import ROOT

# Lowest first. A module may import its own layer's modules and any lower layer's, never a higher one.
LAYERS = [
    ("errors", "io", "paths", "output", "progress", "zoo"),  # no model code: files, consoles, bundled data
    ("base_models",),  # loading models and tokenizers, KV layouts
    ("data",),  # texts and windows, in receiver tokens
    ("adapter",),  # the contract a method implements, and its files
    ("transfer",),  # alignment, the transfer path, caches, recompute
    ("methods",),  # fitting the maps
    ("hub",),  # versions, registry, remotes, resolution
    ("evaluation",),  # measures
    ("modeling", "environment"),  # the app-facing API
    ("commands",),  # hf-fold's commands
]
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def library_modules() -> dict[str, object]:
    """``{dotted name: path}`` for every module of heterofold_hub/, trainers/ and cli.py."""
    paths = [*(ROOT / "heterofold_hub").rglob("*.py"), *(ROOT / "trainers").rglob("*.py"), ROOT / "cli.py"]
    out = {}
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(module: str, path) -> list[tuple[str, int]]:
    """Every module ``module`` imports, anywhere in the file, as ``(dotted name, line)``; relative imports resolved."""
    found = []
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found += [(base, node.lineno)] + [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def owner(name: str, modules) -> str | None:
    """The project module an imported name lives in (``heterofold_hub.x.f`` -> ``heterofold_hub.x``), else None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    modules = library_modules()
    return {m: {o for name, _ in imports(m, p) if (o := owner(name, modules)) and o != m} for m, p in modules.items()}


def subpackage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "heterofold_hub" and len(parts) > 1 else None


def test_every_library_subpackage_has_a_layer():
    unplaced = sorted({s for m in library_modules() if (s := subpackage(m)) and s not in LAYER_OF})
    assert unplaced == [], f"place {unplaced} in LAYERS (and in docs/design.md)"


def test_library_subpackages_import_only_lower_layers():
    upward = []
    modules = library_modules()
    for module, path in modules.items():
        low = subpackage(module)
        if low is None:
            continue
        for target, line in sorted({(owner(name, modules) or "", line) for name, line in imports(module, path)}):
            high = subpackage(target)
            if high is not None and high != low and LAYER_OF[high] > LAYER_OF[low]:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({low}, layer {LAYER_OF[low]}) imports {target} "
                              f"({high}, layer {LAYER_OF[high]})")
    assert upward == [], "\n".join(upward)


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """One line per import circle found by a depth-first walk of ``edges`` (each back edge closes one)."""
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                found.append(" -> ".join(path[path.index(target):] + [module, target]))
            elif target not in state:
                visit(target, path + [module])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    return found


def test_no_import_cycle_between_modules():
    assert cycles(graph()) == []


def test_the_cycle_check_finds_circles_and_only_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []  # a diamond is no circle


def test_a_late_import_is_an_edge(tmp_path):
    """An import inside a function counts: hiding an edge there does not remove it."""
    module = tmp_path / "late.py"
    module.write_text("def f():\n    from heterofold_hub.hub import registry\n")
    assert ("heterofold_hub.hub.registry", 2) in imports("heterofold_hub.late", module)


def test_the_library_never_imports_the_trainer_or_the_cli():
    offenders = [f"{module}:{line} imports {name}" for module, path in library_modules().items()
                 if module.startswith("heterofold_hub") for name, line in imports(module, path)
                 if name.split(".")[0] in ("trainers", "cli")]
    assert offenders == []


def test_the_trainer_never_imports_the_commands():
    offenders = [f"{module}:{line} imports {name}" for module, path in library_modules().items()
                 if module.startswith("trainers") for name, line in imports(module, path)
                 if name.startswith("heterofold_hub.commands") or name.split(".")[0] == "cli"]
    assert offenders == []


def test_importing_every_library_module_loads_no_trainer_module():
    code = ("import importlib, pkgutil, sys, heterofold_hub\n"
            "for m in pkgutil.walk_packages(heterofold_hub.__path__, 'heterofold_hub.'): importlib.import_module(m.name)\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('trainers', 'cli', 'lightning')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"

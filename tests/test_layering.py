"""Dependencies point one way: cli.py -> trainers/ -> heterofold_hub/, and inside the library each subpackage
imports only the layers below it (docs/design.md, "Layers"). Every import counts, also one inside a function: a late
import hides an edge from a reader but not from this test. The CLI and the trainers are installed inside the
package, as ``heterofold_hub.cli`` and ``heterofold_hub.trainers`` (the root's ``cli.py`` and ``trainers/``,
served under those names in a checkout: docs/packaging.md), yet the library, the rest of heterofold_hub, never imports them,
under either name."""

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


APP = ("heterofold_hub.cli", "heterofold_hub.trainers")  # inside the package, not part of the library


def is_app(module: str) -> bool:
    return module.split(".")[0] in ("trainers", "cli") or any(module == a or module.startswith(a + ".") for a in APP)


def root_name(module: str) -> str:
    """The CLI's and the trainers' modules under their root names (``heterofold_hub.trainers.x`` -> ``trainers.x``),
    so each module is one node whichever name imports it."""
    for app in APP:
        if module == app or module.startswith(app + "."):
            return module.removeprefix("heterofold_hub.")
    return module


def library_modules() -> dict[str, object]:
    """``{dotted name: path}`` for every module of heterofold_hub/, trainers/ and cli.py (each once)."""
    package = [p for p in (ROOT / "heterofold_hub").rglob("*.py")
               if not is_app(".".join(p.relative_to(ROOT).with_suffix("").parts))]
    out = {}
    for path in [*package, *(ROOT / "trainers").rglob("*.py"), ROOT / "cli.py"]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(module: str, path, *, as_written: bool = False) -> list[tuple[str, int]]:
    """Every module ``module`` imports, anywhere in the file, as ``(dotted name, line)``; relative imports resolved,
    the CLI's and the trainers' modules under their root names unless ``as_written``."""
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
    return found if as_written else [(root_name(name), line) for name, line in found]


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
    modules = library_modules()
    assert "heterofold_hub.hub.registry" in modules and "heterofold_hub.cli" not in modules and "cli" in modules
    offenders = [f"{module}:{line} imports {name}" for module, path in modules.items()
                 if module.startswith("heterofold_hub") for name, line in imports(module, path) if is_app(name)]
    assert offenders == []


def test_the_trainer_never_imports_the_commands():
    offenders = [f"{module}:{line} imports {name}" for module, path in library_modules().items()
                 if module.startswith("trainers") for name, line in imports(module, path)
                 if name.startswith("heterofold_hub.commands") or name.split(".")[0] == "cli"]
    assert any(n == "trainers.calibrate" for n, _ in imports("trainers.train", ROOT / "trainers" / "train.py"))
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
    bare = [f"{path.relative_to(ROOT)}:{line} {name}" for path in users
            for name, line in imports("", path, as_written=True) if name.split(".")[0] in ("trainers", "cli")]
    assert bare == []

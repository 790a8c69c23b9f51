"""The core wheel's one build step; its metadata is pyproject.toml's.

The repository keeps ``cli.py``, ``trainers/``, ``registry.json``, ``cards/`` and the embedded hub ``hub/`` at its
root (the project's layout). The wheel holds them inside the package, copied (never linked): ``heterofold_hub/cli.py``,
``heterofold_hub/trainers/`` and ``heterofold_hub/shipped/`` (``registry.json``, the card template and the embedded
hub's core repos, ``heterofold_hub.paths.CORE_REPOS``). An editable install copies nothing: it runs the root's files
in place (``heterofold_hub.paths.serve_root_modules``). The same files go into the sdist, so a wheel built from it
is the same. Companion distributions: ``scripts/build_dists.py``. See docs/packaging.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _paths():
    """heterofold_hub/paths.py on its own (it imports nothing of the project): the core repos' list."""
    spec = importlib.util.spec_from_file_location("_heterofold_paths", ROOT / "heterofold_hub" / "paths.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def package_files() -> dict[str, str]:
    """``{path in the package: path in the repository}`` for every file the build copies in, relative paths."""
    paths = _paths()
    files = {"cli.py": "cli.py", "shipped/registry.json": "registry.json"}
    files |= {f"trainers/{p.relative_to(ROOT / 'trainers').as_posix()}": p.relative_to(ROOT).as_posix()
              for p in sorted((ROOT / "trainers").rglob("*.py")) if "__pycache__" not in p.parts}
    files |= {f"shipped/cards/{p.name}": f"cards/{p.name}" for p in sorted((ROOT / "cards").glob("*.j2"))}
    for repo_id in paths.CORE_REPOS:
        repo = ROOT / "hub" / "repos" / repo_id
        if not (repo / "HEAD").is_file():
            raise SystemExit(f"The core wheel ships the embedded repo {repo_id}, but {repo} is not a git repository: "
                             "build from a complete checkout (or its sdist).")
        files |= {f"shipped/{p.relative_to(ROOT).as_posix()}": p.relative_to(ROOT).as_posix()
                  for p in sorted(repo.rglob("*")) if p.is_file()}
    return files


class BuildPy(build_py):
    """build_py, plus the root's files copied into the package (and listed as sources, so the sdist has them)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # the checkout's own files are imported and read in place
            return
        package = Path(self.build_lib) / "heterofold_hub"
        for target, source in package_files().items():
            self.mkpath(str((package / target).parent))
            self.copy_file(str(ROOT / source), str(package / target), preserve_mode=False)

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), *package_files().values()]


setup(cmdclass={"build_py": BuildPy})

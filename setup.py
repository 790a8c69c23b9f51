"""The core wheel's one build step; its metadata is pyproject.toml's.

The repository keeps ``cli.py``, ``trainers/``, ``registry.json``, ``cards/`` and the embedded hub ``hub/`` at its
root (the project's layout). The wheel holds them inside the package, copied (never linked): ``heterofold_hub/cli.py``,
``heterofold_hub/trainers/`` and ``heterofold_hub/shipped/`` (``registry.json``, the card template and the embedded
hub's repos). An editable install copies nothing: it runs the root's files
in place (``heterofold_hub.paths.serve_root_modules``). The same files go into the sdist, so a wheel built from it
is the same. See docs/packaging.md.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def package_files() -> dict[str, str]:
    """``{path in the package: path in the repository}`` for every file the build copies in, relative paths."""
    files = {"cli.py": "cli.py", "shipped/registry.json": "registry.json"}
    files |= {f"trainers/{p.relative_to(ROOT / 'trainers').as_posix()}": p.relative_to(ROOT).as_posix()
              for p in sorted((ROOT / "trainers").rglob("*.py")) if "__pycache__" not in p.parts}
    files |= {f"shipped/cards/{p.name}": f"cards/{p.name}" for p in sorted((ROOT / "cards").glob("*.j2"))}
    for repo in sorted((ROOT / "hub" / "repos").glob("*/*")):
        if (repo / "HEAD").is_file():  # a bare git repo: never snapshots/ or locks/
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

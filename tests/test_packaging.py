"""Packaging, with real parts: ``scripts/build_dists.py`` builds the core wheel and the companion adapter wheels
(once per session, ~20 s), each checked against the index's limits; a fresh virtualenv outside the checkout
installs them from those local files (``pip --no-index --find-links``), and there the README's Python hand-off
example answers on the real pair, ``hf-fold list`` / ``pull`` / ``push`` and the tiny pair work, a version no
distribution carries fails naming how to get it, and nothing is written into site-packages. The checkout itself
has no links and imports each module under one name. (The embedded hub's export: tests/test_export.py.)

The virtualenvs get their heavy dependencies (torch, transformers, the GGUF packages) from this interpreter's
site-packages, added as a plain path (a ``.pth`` line: that folder's own ``.pth`` files, the editable install's
import hook among them, are not run), so ``heterofold_hub`` and the adapters can only come from the wheels. The
real pair's GGUF files are converted once per machine: the venv's ``$HF_FOLD_HOME/models`` is this suite's
``paths.models_dir()`` (content-addressed by the GGUF's sha256, shared with tests/test_real_pair.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from heterofold_hub import paths
from heterofold_hub.hub.base import version_key

from helpers import ROOT

TINY_PAIR = ("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")
L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
S2G = "heterofold/smollm2-135m-to-gemma3-270m"
MB = 1_000_000
REGISTRY = json.loads((ROOT / "registry.json").read_text())
EMBEDDED = {a["repo_id"]: a for a in REGISTRY["adapters"] if a["hub"] == "embedded"}


def default_version(repo_id: str) -> str:
    """The newest release: a pre-release is never the default (nor shipped in a wheel)."""
    return max((v["version"] for v in EMBEDDED[repo_id]["versions"] if "-rc." not in v["version"]), key=version_key)


# -- the checkout --------------------------------------------------------------------------------------------------
def test_the_checkout_tracks_no_links_and_keeps_the_root_layout():
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [line for line in staged.splitlines() if line.startswith("120000")] == []  # mode 120000: a symlink
    assert all((ROOT / name).exists() for name in ("heterofold_hub", "trainers", "cards", "registry.json", "cli.py"))
    assert not (ROOT / "heterofold_hub" / "shipped").exists() and not (ROOT / "heterofold_hub" / "cli.py").exists()


def test_a_checkout_imports_the_root_cli_and_trainers_under_the_package_names_only():
    """heterofold_hub.cli and heterofold_hub.trainers are the root's cli.py and trainers/ (one file, one module);
    the bare names refuse to import, and the shipped data is the root's."""
    import heterofold_hub.cli
    import heterofold_hub.trainers.train
    from heterofold_hub.hub.cards import template_path
    from heterofold_hub.hub.registry import PROJECT_REGISTRY

    assert Path(heterofold_hub.cli.__file__) == ROOT / "cli.py"
    assert Path(heterofold_hub.trainers.train.__file__) == ROOT / "trainers" / "train.py"
    assert not paths.shipped_is_installed()
    assert (PROJECT_REGISTRY, template_path()) == (ROOT / "registry.json", ROOT / "cards" / "adapter_card.md.j2")
    for bare in ("cli", "trainers", "trainers.train"):
        run = subprocess.run([sys.executable, "-c", f"import {bare}"], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert run.returncode == 1 and "ImportError: Import heterofold_hub." in run.stderr, (bare, run.stderr[-500:])
    run = subprocess.run([sys.executable, "cli.py", "list"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0 and S2G in run.stdout, run.stderr[-2000:]


def test_every_embedded_repo_ships_in_exactly_one_distribution():
    homes = [*paths.CORE_REPOS, *(repo for repos in paths.COMPANIONS.values() for repo in repos)]
    assert sorted(homes) == sorted(EMBEDDED)  # each once, none forgotten
    assert all(paths.distribution_of(repo) for repo in EMBEDDED)


def test_the_project_urls_are_the_one_address_the_package_and_the_readme_use():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Repository"] == paths.REPOSITORY_URL and paths.FILES_URL == f"{paths.REPOSITORY_URL}/blob/main/"
    assert all(url.startswith(paths.REPOSITORY_URL) for url in urls.values())


# -- the wheels ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path]:
    """Every distribution, built by the repository's script: {distribution name: wheel}."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_dists.py"), "--out", str(out)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr[-3000:]
    print(build.stdout)
    wheels = {}
    for wheel in out.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        wheels[re.search(r"^Name: (.+)$", metadata, flags=re.M).group(1)] = wheel
    yield wheels
    shutil.rmtree(out)


def read_wheel(wheel: Path) -> tuple[dict[str, zipfile.ZipInfo], dict[str, str]]:
    """The wheel's entries, and its dist-info files' text by name (METADATA, entry_points.txt, ...)."""
    with zipfile.ZipFile(wheel) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        meta = {n.split("/", 1)[1]: archive.read(n).decode() for n in infos if n.split("/")[0].endswith(".dist-info")
                and n.count("/") == 1}
    return infos, meta


def test_the_core_wheel_is_small_and_holds_one_package_with_the_core_data(dists):
    wheel = dists[paths.CORE_DISTRIBUTION]
    assert wheel.stat().st_size <= 20 * MB, f"core wheel {wheel.stat().st_size / MB:.1f} MB"
    infos, meta = read_wheel(wheel)
    assert {name.split("/")[0] for name in infos} == {"heterofold_hub", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "hf-fold = heterofold_hub.cli:run" in meta["entry_points.txt"]
    assert {"heterofold_hub/cli.py", "heterofold_hub/trainers/__init__.py", "heterofold_hub/trainers/train.py",
            "heterofold_hub/shipped/registry.json", "heterofold_hub/shipped/cards/adapter_card.md.j2"} <= infos.keys()
    assert [n for n, info in infos.items() if stat.S_ISLNK(info.external_attr >> 16)] == []
    with zipfile.ZipFile(wheel) as archive:
        assert json.loads(archive.read("heterofold_hub/shipped/registry.json")) == REGISTRY
    shipped_repos = {"/".join(n.split("/")[4:6]) for n in infos if n.startswith("heterofold_hub/shipped/hub/repos/")}
    assert shipped_repos == set(paths.CORE_REPOS)  # the tiny test pair; the real pair's are companions
    for model in TINY_PAIR:
        assert f"heterofold_hub/zoo/models/{model.split('/')[1]}/model.safetensors" in infos


@pytest.mark.parametrize("distribution", sorted(paths.COMPANIONS))
def test_a_companion_wheel_carries_its_repos_default_versions_only(dists, distribution):
    wheel = dists[distribution]
    assert wheel.stat().st_size < 100 * MB, f"{wheel.name} {wheel.stat().st_size / MB:.1f} MB"
    infos, meta = read_wheel(wheel)
    package = distribution.replace("-", "_")
    version = re.search(r"^Version: (.+)$", meta["METADATA"], flags=re.M).group(1)
    assert f"Requires-Dist: {paths.CORE_DISTRIBUTION}=={version}" in meta["METADATA"]
    assert f"[{paths.ADAPTERS_GROUP}]\n{distribution.removeprefix('heterofold-hub-adapters-')} = {package}" \
        in meta["entry_points.txt"]
    expected = {f"{package}/{repo}/{default_version(repo)}/{name}"
                for repo in paths.COMPANIONS[distribution]
                for name in next(v for v in EMBEDDED[repo]["versions"] if v["version"] == default_version(repo))["files"]}
    data = {n for n in infos if n.startswith(f"{package}/")}
    assert data == expected | {f"{package}/__init__.py", f"{package}/{paths.COMPANION_MANIFEST}"}
    with zipfile.ZipFile(wheel) as archive:
        manifest = json.loads(archive.read(f"{package}/{paths.COMPANION_MANIFEST}"))
    assert {repo: carried["version"] for repo, carried in manifest["repos"].items()} == {
        repo: default_version(repo) for repo in paths.COMPANIONS[distribution]}


# -- installed, outside the checkout -------------------------------------------------------------------------------
def make_venv(where: Path, dist_dir: Path, names: list[str]) -> Path:
    """A fresh virtualenv with ``names`` installed from ``dist_dir`` only (a real `pip install`, console script
    included), its dependencies from this interpreter's site-packages (see the module docstring)."""
    venv = where / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # pip must see an empty environment
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-index", "--find-links", str(dist_dir), "-q", *names],
                             capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr[-3000:]
    # after the install: pip would take the editable heterofold-hub in these folders for an installed one
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site_packages(venv) / "project-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return venv


@pytest.fixture(scope="session")
def installed(dists, tmp_path_factory) -> Path:
    """The core wheel and every companion, installed by name from the built wheels."""
    venv = make_venv(tmp_path_factory.mktemp("venv"), next(iter(dists.values())).parent, sorted(dists))
    yield venv
    shutil.rmtree(venv)


def site_packages(venv: Path) -> Path:
    [purelib] = (venv / "lib").glob("python3*/site-packages")
    return purelib


def run_in(venv: Path, tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``args`` run from ``tmp_path`` (outside the checkout), with $HF_FOLD_HOME in ``tmp_path`` (its ``models/`` the
    suite's converted GGUF models) and no PYTHONPATH that could bring the checkout's heterofold_hub back."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_FOLD_REGISTRY", paths.HOME_ENV)}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    paths.models_dir().mkdir(parents=True, exist_ok=True)
    if not (home / "models").exists():
        (home / "models").symlink_to(paths.models_dir(), target_is_directory=True)
    env.update(HF_FOLD_HOME=str(home), HF_HUB_OFFLINE="1", COLUMNS="250")
    command = [str(venv / "bin" / args[0]), *args[1:]]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)


def installed_files(venv: Path) -> dict[str, tuple[int, int]]:
    """Every installed file of ours but bytecode: size and mtime, to show nothing was written."""
    found = {}
    for package in site_packages(venv).glob("heterofold_hub*"):
        if package.is_dir() and not package.name.endswith(".dist-info"):
            found |= {str(p.relative_to(site_packages(venv))): (p.stat().st_size, p.stat().st_mtime_ns)
                      for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    return found


def test_installed_list_shows_the_shipped_adapters_from_the_wheel(installed, tmp_path):
    assert not {"cli.py", "trainers"} & {p.name for p in site_packages(installed).iterdir()}
    where = run_in(installed, tmp_path, "python", "-c", "import heterofold_hub.cli, sys; "
                   "print(heterofold_hub.__file__); print(sorted(m for m in sys.modules if m in ('cli', 'trainers')))")
    assert where.returncode == 0, where.stderr[-2000:]
    assert where.stdout.split("\n")[:2] == [str(site_packages(installed) / "heterofold_hub" / "__init__.py"), "[]"]
    listed = run_in(installed, tmp_path, "hf-fold", "list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()[1:]) == sorted(  # after the header
        a["repo_id"] for a in REGISTRY["adapters"])


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("<!-- handoff-example -->\n```python\n", 1)[1].split("```", 1)[0]


def test_installed_wheels_run_the_readme_hand_off_example_on_the_real_pair(installed, tmp_path):
    """The README's Python example, as written, from a folder outside the checkout: the SmolLM2 -> Gemma 3 adapter
    comes from its companion distribution, read in place (its files checked against the installed registry)."""
    before = installed_files(installed)
    (tmp_path / "example.py").write_text(readme_example() + "import heterofold_hub\nprint('RESOLVED', "
                                         "heterofold_hub.__file__, model.resolved.repo_id, model.resolved.version, "
                                         "model.resolved.folder)\n")
    run = run_in(installed, tmp_path, "python", "example.py", timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    printed, where = run.stdout.rsplit("RESOLVED ", 1)
    assert printed.strip().splitlines()[-1].strip() == "73914", printed  # what the example prints last
    module, repo_id, version, folder = where.split()
    assert Path(module).is_relative_to(site_packages(installed))
    assert (repo_id, version) == (S2G, default_version(S2G))
    assert Path(folder) == site_packages(installed) / "heterofold_hub_adapters_smollm2_to_gemma3" / S2G / version
    assert installed_files(installed) == before


def test_installed_pull_of_a_version_no_distribution_carries_names_where_it_is(installed, tmp_path):
    newest = default_version(S2G)
    pulled = run_in(installed, tmp_path, "hf-fold", "pull", S2G, "--out", str(tmp_path / "newest"))
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "newest").iterdir()) == sorted(
        next(v for v in EMBEDDED[S2G]["versions"] if v["version"] == newest)["files"])
    older = run_in(installed, tmp_path, "hf-fold", "pull", f"{S2G}@v1.0.0")
    message = " ".join(older.stderr.split())
    assert older.returncode == 1 and "Traceback" not in older.stderr, older.stderr[-2000:]
    assert f"{S2G} v1.0.0 is not installed" in message and f"carry only {newest}" in message
    assert f"git clone {paths.REPOSITORY_URL}" in message and "HF_FOLD_REGISTRY=" in message


def test_without_its_companion_a_real_pair_adapter_names_the_distribution_to_install(dists, tmp_path):
    venv = make_venv(tmp_path, dists[paths.CORE_DISTRIBUTION].parent, [paths.CORE_DISTRIBUTION])
    pulled = run_in(venv, tmp_path, "hf-fold", "pull", S2G)
    message = " ".join(pulled.stderr.split())
    assert pulled.returncode == 1 and "Traceback" not in pulled.stderr, pulled.stderr[-2000:]
    assert "its files ship in the companion distribution heterofold-hub-adapters-smollm2-to-gemma3" in message
    assert "pip install heterofold-hub-adapters-smollm2-to-gemma3" in message
    tiny = run_in(venv, tmp_path, "hf-fold", "pull", f"{L2Q}@v1.0.0")  # the core wheel's own repos: every version
    assert tiny.returncode == 0, tiny.stderr[-2000:]


FROM_PRETRAINED = f"""
import heterofold_hub, torch
from heterofold_hub import HeteroFoldModel
model = HeteroFoldModel.from_pretrained({TINY_PAIR[0]!r}, {TINY_PAIR[1]!r}, load_sender=True, local_files_only=True)
text = "def add(a, b):\\n    return a + b\\n"
with torch.no_grad():
    cache = model.sender.model(**model.sender.tokenizer(text, return_tensors="pt"), use_cache=True).cache
result = model.transfer(cache, text)
print(heterofold_hub.__file__, model.resolved.repo_id, model.resolved.version, model.resolved.folder,
      result.cache.layers[0].keys.shape[2], len(model.receiver.tokenizer(text).input_ids) - 1, result.prefilled)
"""


def test_installed_from_pretrained_transfers_a_cache_and_writes_under_hf_fold_home(installed, tmp_path):
    before = installed_files(installed)
    run = run_in(installed, tmp_path, "python", "-c", FROM_PRETRAINED)
    assert run.returncode == 0, run.stderr[-3000:]
    module, repo_id, version, folder, transferred, context, prefilled = run.stdout.split()[-7:]
    assert Path(module).is_relative_to(site_packages(installed))
    assert (repo_id, version, prefilled) == (L2Q, "v1.1.0", "False")
    assert int(transferred) == int(context) > 0
    assert Path(folder) == tmp_path / "home" / "embedded" / "snapshots" / L2Q / "v1.1.0"  # not in site-packages
    assert installed_files(installed) == before


def test_installed_push_renders_a_card_into_a_user_hub_and_never_the_installed_registry(installed, tmp_path):
    before = installed_files(installed)
    package = tmp_path / "package"
    pulled = run_in(installed, tmp_path, "hf-fold", "pull", f"{L2Q}@v1.0.0", "--out", str(package))
    assert pulled.returncode == 0, pulled.stderr[-2000:]
    (package / "README.md").unlink()  # push renders its own card
    registry, hub = tmp_path / "mine" / "registry.json", tmp_path / "user-hub"  # not beside it: a "local" hub
    pushed = run_in(installed, tmp_path, "hf-fold", "push", str(package), "--repo", "tester/l2q", "--version", "1.0.0",
                    "--hub-dir", str(hub), "--registry", str(registry))
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    [entry] = json.loads(registry.read_text())["adapters"]
    assert (entry["repo_id"], entry["hub"], entry["versions"][0]["version"]) == ("tester/l2q", "local", "v1.0.0")
    card = subprocess.run(["git", f"--git-dir={hub / 'repos' / 'tester' / 'l2q'}", "show", "v1.0.0:README.md"],
                          capture_output=True, text=True, check=True).stdout  # the published version's card
    assert "# tester/l2q" in card and "v1.0.0" in card

    refused = run_in(installed, tmp_path, "hf-fold", "push", str(package), "--repo", "tester/l2q", "--version",
                     "1.0.1", "--hub-dir", str(hub))  # no --registry: the default is the installed one
    assert refused.returncode == 1
    installed_registry = site_packages(installed) / "heterofold_hub" / "shipped" / "registry.json"
    message = " ".join(refused.stderr.split())
    assert f"{installed_registry} is the registry installed with heterofold-hub" in message
    assert "--registry PATH or HF_FOLD_REGISTRY=PATH" in message and "Traceback" not in refused.stderr
    assert not (hub / "repos" / "tester" / "l2q" / "refs" / "tags" / "v1.0.1").exists()  # refused before publishing
    assert installed_files(installed) == before

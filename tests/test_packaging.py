"""`pip install .` gives a working package: the wheel holds heterofold_hub alone (the CLI and the trainers inside
it, no bare `cli` or `trainers`) with the shipped data, and installed into a fresh virtualenv, away from the
checkout, `hf-fold list`, `from_pretrained` of the tiny pair and `hf-fold push` work without writing into
site-packages. The wheel is built once per session from a copy of the working tree (~150 MB, ~15 s)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT

TINY_PAIR = ("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")
L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
# Not needed to build a wheel, and large or machine-local: left out of the copy the wheel is built from.
NOT_BUILT_FROM = {".git", ".venv", "build", "dist", "runs", "out", "site", "benchmarks", "docs", "tests",
                  "checkpoints", "catalogue-preview"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    here = Path(folder)
    skipped = {n for n in names if n in ("__pycache__", ".pytest_cache", ".hypothesis") or n.endswith(".egg-info")}
    if here == ROOT:
        skipped |= NOT_BUILT_FROM & set(names)
    if here == ROOT / "hub":
        skipped |= {"snapshots", "locks"}  # a checkout's exported versions are not shipped, only repos/
    return skipped


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    source, out = tmp_path_factory.mktemp("source") / "heterofold-hub", tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, source, symlinks=True, ignore=_ignore)  # links stay links: the build follows them
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(out), str(source)], capture_output=True, text=True)
    shutil.rmtree(source.parent)  # ~150 MB each: pytest keeps the last three sessions' temp folders
    assert build.returncode == 0, build.stderr[-3000:]
    [built] = out.glob("heterofold_hub-*.whl")
    yield built
    shutil.rmtree(out)


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel installed (a real `pip install`, console script included). Its
    dependencies come from this interpreter's site-packages, added as a plain path: that folder's .pth files (the
    editable install's import hook) are not run, so heterofold_hub can only come from the wheel."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # pip must see an empty environment
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                              "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stderr[-3000:]
    # after the install: pip would take the editable heterofold-hub in these folders for an installed one
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site_packages(venv) / "project-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    yield venv
    shutil.rmtree(venv)


def site_packages(venv: Path) -> Path:
    [purelib] = (venv / "lib").glob("python3*/site-packages")
    return purelib


def run_in(venv: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``args`` run from outside the checkout, with $HF_FOLD_HOME in ``tmp_path`` and no PYTHONPATH that could
    bring the checkout's heterofold_hub back."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_FOLD_REGISTRY")}
    env.update(HF_FOLD_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1", COLUMNS="250")
    command = [str(venv / "bin" / args[0]), *args[1:]]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)


def installed_files(venv: Path) -> dict[str, tuple[int, int]]:
    """Every file under the installed heterofold_hub but bytecode: size and mtime, to show nothing was written."""
    package = site_packages(venv) / "heterofold_hub"
    return {str(p.relative_to(package)): (p.stat().st_size, p.stat().st_mtime_ns) for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_a_checkout_reaches_the_namespaced_names_through_links_to_the_root_files():
    """What the wheel copies, a checkout links: heterofold_hub.cli and heterofold_hub.trainers are the root's cli.py
    and trainers/, and the shipped data resolves to the root's registry.json, hub/ and cards/ (read and written
    there, as before)."""
    from heterofold_hub import paths
    from heterofold_hub.hub.cards import template_path
    from heterofold_hub.hub.registry import PROJECT_REGISTRY

    for link, target in {"cli.py": "cli.py", "trainers": "trainers", "shipped/registry.json": "registry.json",
                         "shipped/hub": "hub", "shipped/cards": "cards"}.items():
        path = ROOT / "heterofold_hub" / link
        assert path.is_symlink() and path.resolve() == ROOT / target
    assert not paths.shipped_is_installed()
    assert (PROJECT_REGISTRY, template_path()) == (ROOT / "registry.json", ROOT / "cards" / "adapter_card.md.j2")


def test_the_wheel_holds_one_namespaced_package_with_the_shipped_data(wheel):
    with zipfile.ZipFile(wheel) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        entry_points = archive.read(next(n for n in infos if n.endswith(".dist-info/entry_points.txt"))).decode()
        shipped_registry = json.loads(archive.read("heterofold_hub/shipped/registry.json"))
    assert {name.split("/")[0] for name in infos} == {"heterofold_hub", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "hf-fold = heterofold_hub.cli:run" in entry_points
    assert {"heterofold_hub/cli.py", "heterofold_hub/trainers/__init__.py", "heterofold_hub/trainers/train.py",
            "heterofold_hub/shipped/cards/adapter_card.md.j2"} <= infos.keys()
    links = [n for n, info in infos.items() if stat.S_ISLNK(info.external_attr >> 16)]
    assert links == []  # the checkout's symlinks became the files they point to
    assert shipped_registry == json.loads((ROOT / "registry.json").read_text())
    embedded = [a["repo_id"] for a in shipped_registry["adapters"] if a["hub"] == "embedded"]
    assert L2Q in embedded
    assert all(f"heterofold_hub/shipped/hub/repos/{repo}/HEAD" in infos for repo in embedded)
    assert not [n for n in infos if n.startswith("heterofold_hub/shipped/hub/") and "/repos/" not in n]  # no snapshots
    for model in TINY_PAIR:
        assert f"heterofold_hub/zoo/models/{model.split('/')[1]}/model.safetensors" in infos
    print(f"wheel {wheel.stat().st_size / 1e6:.0f} MB, {len(infos)} files")


def test_installed_list_shows_the_shipped_adapters_from_the_wheel(installed, tmp_path):
    assert not {"cli.py", "trainers"} & {p.name for p in site_packages(installed).iterdir()}
    where = run_in(installed, tmp_path, "python", "-c", "import heterofold_hub.cli, sys; "
                   "print(heterofold_hub.__file__); print(sorted(m for m in sys.modules if m in ('cli', 'trainers')))")
    assert where.returncode == 0, where.stderr[-2000:]
    assert where.stdout.split("\n")[:2] == [str(site_packages(installed) / "heterofold_hub" / "__init__.py"), "[]"]
    listed = run_in(installed, tmp_path, "hf-fold", "list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    registry = json.loads((site_packages(installed) / "heterofold_hub/shipped/registry.json").read_text())
    assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()[1:]) == sorted(
        a["repo_id"] for a in registry["adapters"])


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

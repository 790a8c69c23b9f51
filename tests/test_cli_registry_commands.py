"""The commands that only read registry.json (list, show, search), run as a user runs them: a real subprocess of the
CLI, piped or on a real pseudo-terminal. They start without torch, fit a 100-column terminal without breaking an
id, print a header row and whole cells when piped, say where a version was measured as its card does, and stay
fast on a registry holding a 50 MB string."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from helpers import ROOT, hf_fold

L2Q = "heterofold/tiny-llama-code-to-tiny-qwen-code"
REGISTRY = json.loads((ROOT / "registry.json").read_text())
REPO_IDS = [e["repo_id"] for e in REGISTRY["adapters"]]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Runs the CLI in this interpreter, then says on stderr whether torch was imported by the time it exited.
TORCH_PROBE = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(f\"\\ntorch imported: "
               "{'torch' in sys.modules}\\n\")); sys.argv = ['hf-fold', *sys.argv[1:]]; from heterofold_hub import cli; cli.run()")


def on_terminal(*args: str, columns: int = 100, timeout: float = 120) -> str:
    """The CLI's stdout on a pseudo-terminal ``columns`` wide (COLUMNS set too, as a shell does), colours removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS=str(columns), TERM="xterm")
    env.pop("NO_COLOR", None), env.pop("FORCE_COLOR", None), env.pop("TTY_COMPATIBLE", None)
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], stdout=follower,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=ROOT, env=env)
    os.close(follower)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([leader], [], [], left)[0], f"hf-fold {' '.join(args)} ran over {timeout} s"
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        os.close(leader)
    assert process.returncode == 0, out.decode(errors="replace")[-2000:]
    return ANSI.sub("", out.decode()).replace("\r\n", "\n")


@pytest.mark.parametrize("args", [["list"], ["search", "qwen"], ["show", L2Q], ["show", f"{L2Q}@1.0.0", "--no-card"],
                                  ["show", "--sender", "heterofold/tiny-llama-code", "--receiver",
                                   "heterofold/tiny-qwen-code"], ["list", "--json"]])
def test_read_only_commands_never_import_torch(args):
    run = subprocess.run([sys.executable, "-c", TORCH_PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout and "torch imported: False" in run.stderr, run.stderr[-500:]


def test_list_at_100_columns_fits_and_keeps_every_id_whole():
    out = on_terminal("list")
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100, out
    shown = [line.split()[0] for line in lines if line.startswith("heterofold/")]
    assert sorted(shown) == sorted(REPO_IDS), out  # each id whole, on one line, once
    assert re.search(r"^repo +latest +recovered +KL", out, re.M), out
    assert "not shown at 100 columns:" in out  # what was left out is said, not hidden


def test_an_empty_list_on_a_terminal_is_a_header_and_no_rows():
    out = on_terminal("list", "--method", "no-such-method")
    assert out.startswith("0 adapter(s) in ") and "heterofold/" not in out


def test_show_at_100_columns_fits_and_keeps_versions_and_file_names_whole():
    out = on_terminal("show", L2Q, "--no-card")
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 100, out
    entry = next(e for e in REGISTRY["adapters"] if e["repo_id"] == L2Q)
    words = set(out.replace(",", " ").split())
    for version in entry["versions"]:
        assert version["version"] in words and version["commit"][:12] in words
        assert set(version["files"]) <= words, out  # adapter.safetensors never folded into two lines


def test_piped_list_and_search_start_with_a_header_row():
    for args in (["list"], ["search", "tiny"]):
        lines = hf_fold(*args).stdout.splitlines()
        assert lines[0].split("\t") == ["repo", "method", "sender", "receiver", "latest", "recovered", "KL", "hub",
                                        "measured on"]
        assert all(len(line.split("\t")) == 9 for line in lines)
    assert sorted(line.split("\t")[0] for line in hf_fold("list").stdout.splitlines()[1:]) == sorted(REPO_IDS)


def test_piped_show_prints_every_cell_whole():
    run = hf_fold("show", L2Q, "--no-card")
    assert run.returncode == 0, run.stderr
    assert "..." not in run.stdout and "…" not in run.stdout, run.stdout
    entry = next(e for e in REGISTRY["adapters"] if e["repo_id"] == L2Q)
    assert entry["sender"]["tokenizer"] in run.stdout and entry["receiver"]["tokenizer"] in run.stdout
    header = next(line for line in run.stdout.splitlines() if line.startswith("version\tcommit"))
    assert header.split("\t") == ["version", "commit", "recovered", "KL", "top-1", "NLL", "measured on", "files"]
    rows = [line.split("\t") for line in run.stdout.splitlines() if line.startswith("v1.")]
    assert {row[-1] for row in rows[:len(entry["versions"])]} == {", ".join(sorted(entry["versions"][-1]["files"]))}


def card_of(entry: dict, version: dict) -> str:
    """The model card a registered version published, from its commit in the embedded hub."""
    repo = ROOT / "hub" / "repos" / entry["repo_id"]
    return subprocess.run(["git", f"--git-dir={repo}", "show", f"{version['commit']}:README.md"], capture_output=True,
                          text=True, check=True).stdout


def card_split(card: str) -> tuple[str, str, str]:
    """(split, windows, context tokens) of a card's 'Held-out evaluation on `SPLIT`: N windows of T context'."""
    return re.search(r"Held-out evaluation on `([^`]+)`: (\d+) windows of (\d+) context", card).groups()


@pytest.mark.parametrize("entry", REGISTRY["adapters"], ids=REPO_IDS)
def test_show_says_where_the_published_figures_were_measured_as_the_card_and_list_do(entry):
    """show's published row names the split its card states (not "a split the registry does not record"); where
    list shows the published figures, it says the same words."""
    run = hf_fold("show", entry["repo_id"], "--no-card")
    assert run.returncode == 0, run.stderr
    newest = entry["versions"][-1]
    split, windows, tokens = card_split(card_of(entry, newest))
    rows = [line.split("\t") for line in run.stdout.splitlines()]
    row = next(r for r in rows if r[0].split(" ")[0] == newest["version"])  # a pre-release's label has more words
    assert row[6] == f"{split}, {windows} x {tokens} tokens, published", run.stdout
    listed = next(line.split("\t") for line in hf_fold("list").stdout.splitlines()
                  if line.startswith(entry["repo_id"] + "\t"))
    if listed[-1].endswith(", published"):  # list shows the published figures where none were measured later
        assert listed[-1] == row[6]


def test_every_registered_version_records_the_split_and_windows_its_card_states():
    for entry in REGISTRY["adapters"]:
        for version in entry["versions"]:
            split, windows, tokens = card_split(card_of(entry, version))
            metrics = version["metrics"]
            assert (metrics.get("data"), metrics.get("windows"), metrics.get("context_tokens")) == (
                split, int(windows), int(tokens)), (entry["repo_id"], version["version"])


@pytest.fixture(scope="module")
def huge_registry(tmp_path_factory) -> Path:
    """The project's registry with one summary of 50 MB (no spaces: the worst case for wrapping), hub beside it."""
    folder = tmp_path_factory.mktemp("huge")
    data = json.loads((ROOT / "registry.json").read_text())
    next(e for e in data["adapters"] if e["repo_id"] == L2Q)["summary"] = "x" * 50_000_000
    (folder / "registry.json").write_text(json.dumps(data))
    (folder / "hub").symlink_to(ROOT / "hub")
    return folder / "registry.json"


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_show_with_a_50mb_summary_finishes_in_seconds_and_says_it_cut_it(huge_registry, terminal):
    start = time.monotonic()
    if terminal:
        out = on_terminal("show", L2Q, "--registry", str(huge_registry), timeout=60)
    else:
        run = subprocess.run([sys.executable, str(ROOT / "cli.py"), "show", L2Q, "--registry", str(huge_registry)],
                             capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                             timeout=60)
        assert run.returncode == 0, run.stderr[-2000:]
        out = run.stdout
    assert time.monotonic() - start < 20  # generous for a busy machine: unbounded, this ran for minutes
    assert "[cut: 49,998,000 more characters; --json prints them]" in " ".join(out.split())
    assert len(out) < 100_000

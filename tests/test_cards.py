"""Model cards: front matter that parses back to the package's metrics, a tidy body, idempotent atomic writes."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml

from heterofold_hub.hub.cards import card_data, card_summary, render_card, write_card
from heterofold_hub.errors import HeteroFoldError

FIXTURE = Path(__file__).parent / "data" / "package"
REPO_ID = "heterofold/tiny-llama-code-to-tiny-qwen-code"


@pytest.fixture
def package(tmp_path) -> Path:
    folder = tmp_path / "package"
    shutil.copytree(FIXTURE, folder)
    return folder


@pytest.fixture
def config() -> dict:
    return json.loads((FIXTURE / "adapter_config.json").read_text())


@pytest.fixture
def metrics() -> dict:
    return json.loads((FIXTURE / "metrics.json").read_text())


def test_front_matter(package, config, metrics):
    text = render_card(package, repo_id=REPO_ID, version="v1.0.0")
    assert text.startswith("---\n")
    data = yaml.safe_load(text.split("---\n")[1])
    assert data == card_data(text)
    assert data["library_name"] == "heterofold-hub"
    assert data["license"] == "apache-2.0"
    assert data["base_model"] == [config["sender"], config["receiver"]]
    assert data["tags"] == sorted(data["tags"])
    assert {"heterofold", "kv-cache", "cache-transfer", "llama", "qwen2"} <= set(data["tags"])
    [entry] = data["model-index"]
    assert entry["name"] == REPO_ID
    [result] = entry["results"]
    assert result["task"]["type"] == "kv-cache-transfer"
    assert result["dataset"] == {"name": "bundled:heldout", "type": "bundled:heldout"}
    own = metrics["methods"][config["method"]]
    assert {m["type"]: m["value"] for m in result["metrics"]} == {k: own[k] for k in ("recovered", "kl", "top1", "nll")}
    assert all(m["name"] for m in result["metrics"])
    assert card_data(render_card(package, repo_id=REPO_ID, license="mit"))["license"] == "mit"


def test_body(package, metrics):
    text = render_card(package, repo_id=REPO_ID, version="v1.0.0")
    own = metrics["methods"]["heterofold"]
    assert f"| heterofold | {own['recovered']:.3f} ± {own['recovered_se']:.3f} |" in text
    assert "| heterofold | 0.890 ± 0.045 | 0.009 ± 0.002 | 0.948 ± 0.006 | 1.763 ± 0.120 |" in text
    assert "| no-context | 0.000 ± 0.000 | 0.070 ± 0.004 | 0.902 ± 0.008 | 1.812 ± 0.122 |" in text
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith(("| native", "| no-context", "| heterofold"))]
    assert rows == ["| native", "| no-context", "| heterofold"]
    assert "Context benefit (no-context NLL − native NLL): 0.055 ± 0.006 nats/token." in text
    assert "`sha256:3bdad3afb5a444d6`" in text and "`sha256:ee537ba873bb756a`" in text
    assert "| receiver | `/tmp/oldzoo/heterofold_hub/zoo/models/tiny-qwen-code` | qwen2 | 3 | 2 | 48 |" in text
    assert "HeteroFoldModel.from_pretrained(" in text and "hf-fold eval --sender" in text
    assert f"hf-fold pull {REPO_ID}@v1.0.0" in text and "| lr | `0.003` |" in text and "heterofold-hub 0.1.0 on 128 training windows" in text
    assert "## Limitations" in text
    assert "\n\n\n" not in text and text.endswith("\n") and not text.endswith("\n\n")
    assert all(line == line.rstrip() for line in text.splitlines())
    lines = text.splitlines()
    assert all(lines[i - 1] == "" for i, line in enumerate(lines) if line.startswith("#"))  # headings stand apart
    summary = card_summary(text)
    assert summary.startswith("A heterofold pair adapter that maps the KV cache of") and summary.endswith("prefill.")
    assert "`" not in summary and "\n" not in summary


def test_plot_only_when_given(package):
    assert "![recovered vs context length]" not in render_card(package, repo_id=REPO_ID)
    (package / "recovered_vs_context.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    text = render_card(package, repo_id=REPO_ID, plot=package / "recovered_vs_context.png")
    assert "![recovered vs context length](recovered_vs_context.png)" in text
    assert "\n\n\n" not in text
    with pytest.raises(HeteroFoldError, match="missing.png is not in"):
        render_card(package, repo_id=REPO_ID, plot="missing.png")


def test_write_card_is_idempotent_and_atomic(package):
    path = write_card(package, repo_id=REPO_ID, version="v1.0.0")
    assert path == package / "README.md"
    first = path.read_bytes()
    assert write_card(package, repo_id=REPO_ID, version="v1.0.0").read_bytes() == first
    assert first.decode() == render_card(package, repo_id=REPO_ID, version="v1.0.0")
    assert sorted(p.name for p in package.iterdir()) == ["README.md", "adapter_config.json", "metrics.json"]


def test_missing_metrics_is_a_clear_error(package):
    (package / "metrics.json").unlink()
    with pytest.raises(HeteroFoldError, match=r"has no metrics\.json.*hf-fold train"):
        render_card(package, repo_id=REPO_ID)
    assert not (package / "README.md").exists()


def test_missing_config_and_foreign_metrics(package, metrics):
    (package / "adapter_config.json").unlink()
    with pytest.raises(HeteroFoldError, match=r"has no adapter_config\.json"):
        write_card(package, repo_id=REPO_ID)
    shutil.copy(FIXTURE / "adapter_config.json", package)
    del metrics["methods"]["heterofold"]
    (package / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(HeteroFoldError, match="no row for this adapter's method 'heterofold'"):
        render_card(package, repo_id=REPO_ID)


def test_a_card_of_an_adapter_derived_from_gemma_states_the_gemma_terms(package, config, metrics):
    """An adapter fitted on Gemma 3's weights is derived from Gemma: its card says so and carries license: gemma;
    one fitted on Apache-2.0 models only stays apache-2.0."""
    config.update(sender="gguf/smollm2-135m-instruct-q4_1", receiver="gguf/gemma3-270m-q4_k_m")
    metrics.update(sender=config["sender"], receiver=config["receiver"])
    (package / "adapter_config.json").write_text(json.dumps(config))
    (package / "metrics.json").write_text(json.dumps(metrics))
    text = render_card(package, repo_id="heterofold/smollm2-to-gemma3")
    assert card_data(text)["license"] == "gemma"
    assert "Gemma Terms of Use (https://ai.google.dev/gemma/terms)" in text
    assert "`gguf/smollm2-135m-instruct-q4_1` (SmolLM2-135M-Instruct (Llama family), Q4_1): Apache-2.0." in text
    assert card_data(render_card(FIXTURE, repo_id=REPO_ID))["license"] == "apache-2.0"


def _usage_snippet(card: str) -> str:
    return card.split("## Usage", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def _from_pretrained_call(snippet: str) -> ast.Call:
    [call] = [node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained"]
    return call


@pytest.mark.parametrize("version", ["v1.0.0", None])
def test_the_usage_snippet_loads_exactly_the_adapter_the_card_describes(package, config, version):
    """Copied as written, the snippet names this repo and version (a call without them resolves the registry's
    newest fit, possibly another adapter), with arguments from_pretrained accepts."""
    import inspect

    from heterofold_hub.modeling import HeteroFoldModel

    call = _from_pretrained_call(_usage_snippet(render_card(package, repo_id=REPO_ID, version=version)))
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert args == [config["sender"], config["receiver"]]
    assert kwargs == ({"adapter": REPO_ID, "revision": version} if version else {"adapter": REPO_ID})
    inspect.signature(HeteroFoldModel.from_pretrained).bind(*args, **kwargs)


def test_a_registered_cards_snippet_run_as_written_loads_that_version(tmp_path):
    """The card of an older version of a registered tiny adapter: its snippet's from_pretrained, executed, resolves
    that repo at that version, not the pair's newest."""
    import subprocess

    from heterofold_hub.hub.registry import Registry

    root = Path(__file__).resolve().parents[1]
    entry = next(e for e in Registry.load(root / "registry.json").entries() if e.repo_id == REPO_ID)
    older = entry.versions[0]
    assert older.version != entry.versions[-1].version, "the test needs a version that is not the newest"
    folder = tmp_path / "package"
    folder.mkdir()
    for name in ("adapter_config.json", "metrics.json"):
        shown = subprocess.run(["git", "--git-dir", str(root / "hub" / "repos" / REPO_ID), "show",
                                f"{older.commit}:{name}"], check=True, capture_output=True, text=True).stdout
        (folder / name).write_text(shown)
    snippet = _usage_snippet(render_card(folder, repo_id=REPO_ID, version=older.version))
    loading = snippet.split("text =", 1)[0]  # the import and the from_pretrained call
    scope = {}
    exec(compile(loading, "card-snippet", "exec"), scope)  # noqa: S102 (the card's own code)
    resolved = scope["model"].resolved
    assert (resolved.repo_id, resolved.version) == (REPO_ID, older.version)

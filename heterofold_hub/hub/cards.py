"""Model cards for adapter packages: ``README.md`` rendered from the package's config and held-out metrics.

The card is a pure function of ``adapter_config.json``, ``metrics.json`` and the arguments (no clock, no
environment), so rendering twice gives the same bytes and re-publishing an unchanged package is a no-op.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import jinja2
import yaml

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.io import write_bytes_atomic
from heterofold_hub.adapter.config import CONFIG_NAME, METRICS_NAME
from heterofold_hub.hub.registry_schema import PREFERRED_METHOD
from heterofold_hub.paths import shipped_file

TEMPLATE_NAME = "adapter_card.md.j2"
CARD_NAME = "README.md"
BASELINES = ("native", "no-context")  # listed first in the fidelity table, in this order
HIDDEN_ARGS = ("out", "sender", "receiver")  # local output path; the pair has its own section


def template_path() -> Path:
    """The card template, shipped as ``cards/adapter_card.md.j2`` (the repository's, or the wheel's copy)."""
    path = shipped_file(f"cards/{TEMPLATE_NAME}")
    if not path.is_file():
        raise HeteroFoldError(f"Card template {TEMPLATE_NAME} not found at {path}: this install lacks its shipped "
                              "data; reinstall heterofold-hub (pip install --force-reinstall heterofold-hub) or run "
                              "from a source checkout.")
    return path


def _read_json(folder: Path, name: str, fix: str) -> dict:
    path = folder / name
    if not path.is_file():
        raise HeteroFoldError(f"{folder} has no {name}, which the model card is built from. {fix}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise HeteroFoldError(f"{path} is not valid JSON ({e}). {fix}") from None


def _yaml_scalar(value) -> str:
    """A YAML scalar that parses back to ``value`` (JSON scalars are YAML; non-finite floats are not)."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value, ensure_ascii=False)


def _short_fingerprint(fingerprint: str | None) -> str:
    if not fingerprint:
        return "not recorded"
    algo, _, digest = fingerprint.rpartition(":")
    return f"{algo}:{digest[:16]}" if algo else digest[:16]


def _arg_value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters.update(yaml=_yaml_scalar, fingerprint=_short_fingerprint, arg=_arg_value)
    return env


def published_split(config: dict, metrics: dict) -> str | None:
    """The text a package's held-out metrics were measured on: ``metrics.json``'s ``data``, else (packages trained
    before it recorded that) the held-out split of its training arguments; None when neither says. The card states
    it and a push records it in the registry, so ``hf-fold list`` and ``show`` say what the card says."""
    return metrics.get("data") or (config.get("training_args") or {}).get("heldout")


def base_model_terms(config: dict) -> list[dict]:
    """The terms of the pair's packaged base models (``heterofold_hub.base_models.gguf``): an adapter fitted on a model's
    weights is derived from it, so its card states them (Gemma 3: the Gemma Terms of Use)."""
    from heterofold_hub.base_models.gguf import PACKAGED

    return [{"model": config[who], "title": PACKAGED[config[who]].title, "terms": PACKAGED[config[who]].licence,
             "license": PACKAGED[config[who]].card_license} for who in ("sender", "receiver") if config[who] in PACKAGED]


def render_card(package_dir: str | os.PathLike, *, repo_id: str, version: str | None = None,
                license: str | None = None, plot: str | os.PathLike | None = None) -> str:
    """The model card (``README.md`` text) of the adapter package in ``package_dir``, published as ``repo_id``.

    ``license``: default apache-2.0, or the license a base model's terms require ("gemma" for Gemma 3).
    ``plot``: a PNG inside the package (a file name, or a path whose name is used) shown in the card.
    """
    folder = Path(package_dir)
    if not folder.is_dir():
        raise HeteroFoldError(f"{folder} is not a folder; pass the --out folder of `hf-fold train`.")
    config = _read_json(folder, CONFIG_NAME, "Pass the --out folder of `hf-fold train`, or re-run training into it.")
    metrics = _read_json(folder, METRICS_NAME, "`hf-fold train` writes it when training finishes: re-run "
                         "training to completion, or copy that run's metrics.json into the folder.")
    method, rows = config["method"], metrics["methods"]
    if method not in rows:
        raise HeteroFoldError(f"{folder / METRICS_NAME} has no row for this adapter's method {method!r} (rows: "
                              f"{', '.join(rows)}); use the metrics.json `hf-fold train` wrote for this package.")
    for who in ("sender", "receiver"):
        if metrics.get(who) != config[who]:
            raise HeteroFoldError(f"{folder / METRICS_NAME} evaluates {who} {metrics.get(who)!r} but the adapter's "
                                  f"{who} is {config[who]!r}; use the metrics.json written for this package.")
    plot_name = None
    if plot is not None:
        plot_name = Path(plot).name
        if not (folder / plot_name).is_file():
            raise HeteroFoldError(f"Plot {plot_name} is not in {folder}; the card links to it by file name, "
                                  "so copy the plot into the package folder first.")
    meta = config  # pair identity and training record are fields of the config itself
    train_args = meta.get("training_args") or {}
    order = [m for m in BASELINES if m in rows] + [m for m in rows if m not in BASELINES]
    sides = [{"role": who, "model": config[who], "spec": config[f"{who}_spec"],
              "tokenizer": meta.get(f"{who}_tokenizer"), "revision": meta.get(f"{who}_revision")}
             for who in ("sender", "receiver")]
    tags = sorted({"heterofold", "kv-cache", "cache-transfer", method,
                   config["sender_spec"]["model_type"], config["receiver_spec"]["model_type"]})
    terms = base_model_terms(config)
    if license is None:
        license = next((t["license"] for t in terms if t["license"] != "apache-2.0"), "apache-2.0")
    template = template_path()
    return _environment(template.parent).get_template(template.name).render(
        repo_id=repo_id, version=version, license=license, plot=plot_name, config=config, metrics=metrics,
        base_terms=terms, parents=config["extra"].get("parents") if method == "composed" else None,
        factored=config["extra"] if method == "low-rank" else None, preferred=method == PREFERRED_METHOD,
        pivot=config["extra"].get("pivot", {}).get("id"),
        method=method, own=rows[method], rows=[(name, rows[name]) for name in order], tags=tags, sides=sides,
        dataset=published_split(config, metrics) or "held-out text", library_version=meta.get("library_version", "unknown"),
        training_windows=meta.get("training_windows"), local_dir=repo_id.rsplit("/", 1)[-1],
        train_args=[(k, v) for k, v in train_args.items() if k not in HIDDEN_ARGS],
    )


def write_card(package_dir: str | os.PathLike, **kwargs) -> Path:
    """Render the card (same arguments as :func:`render_card`) and write ``README.md`` atomically; returns its path."""
    path = Path(package_dir) / CARD_NAME
    write_bytes_atomic(path, render_card(package_dir, **kwargs).encode("utf-8"))
    return path


def _split(card_text: str) -> tuple[str, str]:
    match = re.match(r"---\n(.*?\n)---\n", card_text, re.DOTALL)
    if not match:
        raise HeteroFoldError("This model card has no YAML front matter (a first line '---' and a closing '---').")
    return match.group(1), card_text[match.end():]


def card_data(card_text: str) -> dict:
    """The card's YAML front matter as a dict."""
    return yaml.safe_load(_split(card_text)[0]) or {}


def card_summary(card_text: str) -> str:
    """The first sentence of the card's description (its first paragraph that is not a heading), plain text."""
    for paragraph in re.split(r"\n\s*\n", _split(card_text)[1]):
        paragraph = " ".join(paragraph.split())
        if paragraph and not paragraph.startswith("#"):
            return re.split(r"(?<=[.!?])\s", paragraph.replace("`", ""), maxsplit=1)[0]
    return ""

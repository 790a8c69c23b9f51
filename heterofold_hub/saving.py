"""Adapter packages on disk: ``adapter_config.json`` + ``adapter.safetensors`` (never pickle)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from .errors import HeteroFoldError, PairMismatchError
from .io import write_bytes_atomic, write_json_atomic
from .methods import get_method
from .methods.base import AdapterConfig, PairAdapter

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter.safetensors"
METRICS_NAME = "metrics.json"  # held-out evaluation written by `hf-fold train`


def save_adapter(adapter: PairAdapter, folder: str | Path) -> Path:
    """Write the adapter's config (its dataclass, as JSON) and weights. Weights go first, so a config on
    disk always has its weights beside it."""
    folder = Path(folder)
    tensors = {k: v.detach().contiguous().cpu() for k, v in adapter.state_dict().items()}
    write_bytes_atomic(folder / WEIGHTS_NAME, save(tensors))
    write_json_atomic(folder / CONFIG_NAME, adapter.config.to_dict())
    return folder


def load_adapter(folder: str | Path) -> PairAdapter:
    """The adapter saved in ``folder``, frozen and in eval mode."""
    folder = Path(folder)
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    if not config_path.is_file() or not weights_path.is_file():
        raise HeteroFoldError(
            f"{folder} is not an adapter package: it needs {CONFIG_NAME} and {WEIGHTS_NAME}. "
            "Pass the --out folder of `hf-fold train`."
        )
    data = json.loads(config_path.read_text())
    config = AdapterConfig.from_dict(data)
    adapter = get_method(config.method)(config)
    state = load_file(weights_path)
    missing = sorted(set(adapter.state_dict()) ^ set(state))
    if missing:
        raise HeteroFoldError(f"{weights_path} does not match its config: tensors {missing} missing or unexpected.")
    try:
        adapter.load_state_dict(state)
    except RuntimeError as err:
        raise HeteroFoldError(f"{weights_path} does not match its config's dims: {str(err).splitlines()[-1].strip()}") from err
    return adapter.requires_grad_(False).eval()


def check_pair(adapter: PairAdapter, sender, receiver, *, source: str | Path) -> None:
    """Refuse an adapter fitted for another pair: KV dims and (when recorded) tokenizer fingerprints
    must match the models actually loaded. ``sender``/``receiver`` are ``Side``s."""
    from .fingerprint import tokenizer_fingerprint

    problems = []
    for role, side in (("sender", sender), ("receiver", receiver)):
        recorded = getattr(adapter.config, f"{role}_spec")
        actual = side.spec.to_dict()
        diff = {k: (recorded.get(k), v) for k, v in actual.items() if recorded.get(k) != v}
        if diff:
            detail = ", ".join(f"{k} {a!r} in the adapter vs {b!r} in {side.name}" for k, (a, b) in diff.items())
            problems.append(f"{role} KV layout differs: {detail}")
        revision = getattr(adapter.config, f"{role}_revision")
        loaded_revision = getattr(getattr(side.model, "config", None), "_commit_hash", None)
        if None not in (revision, loaded_revision) and revision != loaded_revision:
            problems.append(f"{role} {side.name} is revision {loaded_revision}, the adapter was fitted on {revision}")
        fingerprint = getattr(adapter.config, f"{role}_tokenizer")
        if fingerprint and fingerprint != tokenizer_fingerprint(side.tokenizer):
            problems.append(f"{role} tokenizer of {side.name} is not the one the adapter was fitted with "
                            f"(fingerprint {fingerprint[:19]}...)")
    if problems:
        raise PairMismatchError(
            f"Adapter {source} was fitted for {adapter.config.sender} -> {adapter.config.receiver} and does not fit "
            f"{sender.name} -> {receiver.name}:\n  " + "\n  ".join(problems)
            + "\nPass the models it was trained for, or train an adapter for this pair with `hf-fold train`."
        )

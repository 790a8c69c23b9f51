"""Adapter packages on disk: ``adapter_config.json`` + ``adapter.safetensors`` (never pickle), and every integrity
check between those bytes and a usable adapter (hash, size, tensor names and shapes, finite values, the pair).

Like PEFT's ``utils/save_and_load.py`` it sits low: it knows an adapter only as a ``config`` and a ``state_dict``, so
the methods, the transfer path and the hub all build on it and it imports none of them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, fields, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from heterofold_hub.adapter.config import CONFIG_NAME, PICKLE_SUFFIXES, WEIGHTS_NAME, AdapterConfig
from heterofold_hub.base_models.fingerprint import tokenizer_fingerprint
from heterofold_hub.errors import HeteroFoldError, IntegrityError, PairMismatchError
from heterofold_hub.io import write_bytes_atomic, write_json_atomic

REFETCH = ("Do not use it: download the package again (`hf-fold pull REPO@VERSION --out NEW_DIR`; for a hub "
           "snapshot, delete the folder first) or re-run `hf-fold train`.")


def sha256_bytes(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def non_finite(named_tensors) -> list[str]:
    """Names, from ``(name, tensor)`` pairs, of the floating-point tensors holding NaN or inf."""
    return [name for name, t in named_tensors if t.is_floating_point() and not torch.isfinite(t).all()]


def save_adapter(adapter, folder: str | Path) -> Path:
    """Write the adapter's weights, then its config (its dataclass as JSON) recording their hash and size. Each
    write is atomic; a save interrupted between the two leaves a config whose hash refuses the new weights."""
    folder = Path(folder)
    tensors = _tensors(adapter)
    broken = non_finite(tensors.items())
    if broken:
        raise IntegrityError(f"Not saving the adapter to {folder}: tensor(s) {broken} hold NaN or inf values, so "
                             "every transfer would be garbage (did training diverge?). Lower the learning rate and "
                             "fit again.")
    data = save(tensors)
    adapter.config = replace(adapter.config, weights_sha256=sha256_bytes(data), weights_bytes=len(data))
    write_bytes_atomic(folder / WEIGHTS_NAME, data)
    write_json_atomic(folder / CONFIG_NAME, adapter.config.to_dict())
    return folder


def _tensors(adapter) -> dict:
    return {k: v.detach().contiguous().cpu() for k, v in adapter.state_dict().items()}


def adapter_bytes(adapter) -> bytes:
    """The bytes ``save_adapter`` writes as ``adapter.safetensors`` (deterministic), e.g. to hash an adapter."""
    return save(_tensors(adapter))


def read_package(folder: str | Path) -> tuple[AdapterConfig, dict[str, torch.Tensor], Path]:
    """``folder``'s config and weights as ``(config, state_dict, weights_path)``, their integrity checked: refuses
    (IntegrityError, naming the file and the fix) weights that differ from the hash/size the config records,
    unreadable files, and pickle-format weights (never unpickled). The tensors are checked against the method's
    shapes by :func:`check_tensors`, once the method is known."""
    folder = Path(folder)
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    if not weights_path.is_file() and folder.is_dir():
        pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickled:
            raise IntegrityError(
                f"{folder} holds weights as {', '.join(pickled)} (pickle) and no {WEIGHTS_NAME}. HeteroFold loads "
                "safetensors only and never unpickles a file, since unpickling can run arbitrary code. Convert it "
                "where you trust its origin (safetensors.torch.save_file(torch.load(PATH, weights_only=True), "
                f"'{WEIGHTS_NAME}')), or train the adapter again with `hf-fold train`.")
    if not config_path.is_file() or not weights_path.is_file():
        raise HeteroFoldError(
            f"{folder} is not an adapter package: it needs {CONFIG_NAME} and {WEIGHTS_NAME}. "
            "Pass the --out folder of `hf-fold train`."
        )
    config = read_config(config_path)
    try:
        data = weights_path.read_bytes()  # hashed and parsed from the same bytes: nothing can change in between
    except OSError as err:
        raise IntegrityError(f"Cannot read {weights_path}: {err.strerror or err}. Check its permissions.") from None
    check_recorded(weights_path, data, config)
    try:
        state = load(data)
    except (SafetensorError, ValueError, TypeError, KeyError, RuntimeError) as err:
        raise IntegrityError(f"{weights_path} is not a readable safetensors file ({err}); it is truncated or "
                             f"corrupt. {REFETCH}") from None
    return config, state, weights_path


def read_config(path: Path) -> AdapterConfig:
    """``adapter_config.json`` as an AdapterConfig; IntegrityError naming the file and what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise IntegrityError(f"{path} is not valid JSON ({err}): the package is damaged. {REFETCH}") from None
    required = [f.name for f in fields(AdapterConfig) if f.default is MISSING and f.default_factory is MISSING]
    missing = [name for name in required if not isinstance(data, dict) or name not in data]
    if missing:
        raise IntegrityError(f"{path} is not an adapter config: it lacks field(s) {missing}. {REFETCH}")
    try:
        return AdapterConfig.from_dict(data)
    except HeteroFoldError as err:
        raise IntegrityError(f"{path}: {err} {REFETCH}") from None
    except (TypeError, KeyError, AttributeError, IndexError) as err:  # a field of the wrong JSON type
        raise IntegrityError(f"{path} has a field of the wrong type ({type(err).__name__}: {err}). {REFETCH}") from None


def check_recorded(path: Path, data: bytes, config: AdapterConfig) -> None:
    """The weights' size and hash equal what the config recorded when they were saved (when it recorded them)."""
    expected_size, expected_hash = config.weights_bytes, config.weights_sha256
    if expected_size is not None and len(data) != expected_size:
        raise IntegrityError(f"{path} is {len(data)} bytes, but {CONFIG_NAME} records {expected_size} bytes "
                             f"(hash {expected_hash}): the file is truncated or was altered. {REFETCH}")
    if expected_hash is not None and sha256_bytes(data) != expected_hash:
        raise IntegrityError(f"{path} has hash {sha256_bytes(data)}, but {CONFIG_NAME} records {expected_hash}: "
                             f"the file was altered, or a save was interrupted. {REFETCH}")


def check_tensors(path: Path, state: dict, expected: dict, config: AdapterConfig) -> None:
    """Every tensor the config implies is there with its shape, a float dtype and finite values, and no other."""
    problems = [f"tensor {name!r} is missing (expected shape {list(expected[name].shape)})"
                for name in sorted(expected.keys() - state.keys())]
    problems += [f"tensor {name!r} (shape {list(state[name].shape)}) is not part of a {config.method} adapter"
                 for name in sorted(state.keys() - expected.keys())]
    for name in sorted(expected.keys() & state.keys()):
        got, want = state[name], expected[name]
        if got.shape != want.shape:
            problems.append(f"tensor {name!r} has shape {list(got.shape)}, the config expects {list(want.shape)}")
        elif not got.is_floating_point():
            problems.append(f"tensor {name!r} has dtype {got.dtype}, expected a floating-point dtype")
        elif not torch.isfinite(got).all():
            problems.append(f"tensor {name!r} holds NaN or inf values")
    if problems:
        layers = len(config.layer_sources)
        raise IntegrityError(
            f"{path} does not match {CONFIG_NAME} ({config.method}: {layers} receiver layers, in_features "
            f"{config.in_features} = {len(config.layer_sources[0])} sender layer(s) x {config.sender_spec['kv_heads']} "
            f"kv_heads x {config.sender_spec['head_dim']} head_dim, out_features {config.out_features}):\n  "
            + "\n  ".join(problems) + f"\nThe config or the weights were edited, or come from different packages. {REFETCH}")


def check_pair(adapter, sender, receiver, *, source: str | Path) -> None:
    """Refuse an adapter fitted for another pair: KV dims and (when recorded) tokenizer fingerprints
    must match the models actually loaded. ``sender``/``receiver`` are ``Side``s."""
    problems = []
    for role, side in (("sender", sender), ("receiver", receiver)):
        recorded = getattr(adapter.config, f"{role}_spec")
        actual = side.spec.to_dict()
        diff = {k: (recorded.get(k), v) for k, v in actual.items() if recorded.get(k) != v}
        if diff:
            detail = ", ".join(f"{k} {a!r} in the adapter vs {b!r} in {side.name}" for k, (a, b) in diff.items())
            problems.append(f"{role} KV layout differs: {detail}")
        revision = getattr(adapter.config, f"{role}_revision")
        loaded_revision = side.revision
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

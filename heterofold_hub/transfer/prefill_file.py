"""A :class:`~heterofold_hub.transfer.sender.SenderPrefill` as one safetensors file, so a sender's cache can travel
to a receiver in another process or on another machine and keep its identity.

    prefill.save_pretrained("notes.safetensors")                      # sender process
    prefill = SenderPrefill.from_pretrained("notes.safetensors", sender=model.sender)   # receiver process
    result = model.transfer(prefill, prefill.texts)    # another text is refused, as in-process

The file (format ``heterofold.sender_prefill``, version :data:`FORMAT_VERSION`; no pickle) holds

- tensors: ``layers.<i>.keys`` / ``layers.<i>.values`` ``[B, Hs, Ts, Ds]`` (every position of every layer, right-padded;
  in the wire dtype), ``input_ids`` / ``attention_mask`` ``[B, Ts]`` int64, ``offsets.<row>`` ``[T_row, 2]`` int64,
  and ``surprisal`` ``[B, Ts]`` float32 when the prefill has it;
- string metadata: ``format``, ``format_version``, ``heterofold_version``, ``texts`` (JSON list: **the texts travel
  in the file**, since the receiver plans its transfer from them and a refusal names where another text differs),
  ``text_sha256`` and ``token_sha256`` (per row: the sha256 of the text's UTF-8 and of its sender token ids),
  ``sender`` (JSON: the sender's ``id``, ``revision`` and KV ``spec``), ``dtype`` (the K/V dtype in memory),
  ``wire_dtype`` (the K/V dtype in the file), ``cache_layers`` (JSON: each layer's cache class and what rebuilds it),
  ``payload_crc32`` (a CRC-32 of every tensor's bytes: a flipped bit anywhere is refused; a checksum against
  accidents, not a signature against tampering).

Loading checks the format and version, the checksum, that every text and token sequence still hashes to its digest,
the shapes against the recorded spec and, given the receiver's ``sender`` side, that the file came from that model.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_bytes
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from heterofold_hub.errors import HeteroFoldError, IntegrityError, PairMismatchError
from heterofold_hub.io import write_bytes_atomic

FORMAT = "heterofold.sender_prefill"
FORMAT_VERSION = 1  # bumped when the file's layout changes; a reader refuses versions it does not know
FILE_NAME = "sender_prefill.safetensors"  # the file inside a folder given to save_pretrained / from_pretrained
WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LAYER_TYPES = {"DynamicLayer": DynamicLayer, "DynamicSlidingWindowLayer": DynamicSlidingWindowLayer}


def file_of(path: str | Path) -> Path:
    """The file a path names: itself when it ends in ``.safetensors``, else ``<folder>/sender_prefill.safetensors``."""
    path = Path(path).expanduser()
    return path if path.suffix == ".safetensors" else path / FILE_NAME


def text_sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def sender_problem(made: dict, side) -> str | None:
    """Why a prefill made by ``made`` (a :func:`sender_record`) is not the cache of ``side``, or None when it is.

    The KV layout must be equal; the revisions too when both are known (a GGUF file's sha256, a Hub commit), else
    the ids (a model loaded under another name but of the same revision is the same model)."""
    want = {"id": side.name, "revision": side.revision, "spec": side.spec.to_dict()}
    if made["spec"] != want["spec"]:
        return (f"it was made by {made['id']!r} (KV layout {made['spec']}), but the sender here is {want['id']!r} "
                f"(KV layout {want['spec']})")
    if made["revision"] is not None and want["revision"] is not None:
        if made["revision"] != want["revision"]:
            return (f"it was made by {made['id']!r} at revision {made['revision']}, but the sender here is "
                    f"{want['id']!r} at revision {want['revision']}")
    elif made["id"] != want["id"]:
        return f"it was made by {made['id']!r}, but the sender here is {want['id']!r}"
    return None


def _layer_record(layer) -> dict:
    kind = type(layer).__name__
    if kind not in LAYER_TYPES or type(layer) is not LAYER_TYPES[kind]:
        raise HeteroFoldError(f"This prefill's cache holds a {kind} layer; a prefill file keeps DynamicLayer and "
                              "DynamicSlidingWindowLayer layers (what prefill_sender makes). Prefill with "
                              "prefill_sender, or pass the model a DynamicCache().")
    if kind == "DynamicLayer":
        return {"type": kind}
    return {"type": kind, "sliding_window": layer.sliding_window, "cumulative_length": layer.cumulative_length}


def _library_version() -> str | None:
    try:
        return version("heterofold-hub")
    except PackageNotFoundError:
        return None


def _crc32(tensors: dict[str, torch.Tensor]) -> str:
    crc = 0
    for name in sorted(tensors):
        crc = zlib.crc32(name.encode(), crc)
        crc = zlib.crc32(tensors[name].contiguous().view(-1).view(torch.uint8).numpy(), crc)
    return f"{crc:08x}"


def save(prefill, path: str | Path, *, dtype: torch.dtype | None = None) -> Path:
    """Write ``prefill`` to ``path`` atomically (see the module docstring); ``dtype``: the K/V dtype in the file
    (``torch.bfloat16`` halves a float32 cache; loading casts back). Returns the file written."""
    if prefill.sender is None:
        raise HeteroFoldError("This prefill does not record which model made it (it was not made by prefill_sender); "
                              "set `prefill.sender = sender_record(side)` for the sender side that made it, or make it "
                              "with prefill_sender(side, texts).")
    layers = prefill.layers
    kept = layers[0][0].dtype
    wire = kept if dtype is None else dtype
    if wire not in WIRE_DTYPES.values():
        raise HeteroFoldError(f"dtype={dtype}: a prefill file holds K/V as {', '.join(f'torch.{n}' for n in WIRE_DTYPES)}; "
                              "pass one of those, or None to keep the cache's own dtype.")
    tensors = {}
    for i, (keys, values) in enumerate(layers):
        tensors[f"layers.{i}.keys"] = keys.detach().to("cpu", wire).contiguous()
        tensors[f"layers.{i}.values"] = values.detach().to("cpu", wire).contiguous()
    tensors["input_ids"] = prefill.input_ids.to("cpu", torch.int64).contiguous()
    tensors["attention_mask"] = prefill.attention_mask.to("cpu", torch.int64).contiguous()
    for row, offsets in enumerate(prefill.offsets):
        tensors[f"offsets.{row}"] = offsets.to("cpu", torch.int64).contiguous()
    if prefill.surprisal is not None:
        tensors["surprisal"] = prefill.surprisal.to("cpu", torch.float32).contiguous()
    metadata = {
        "format": FORMAT, "format_version": str(FORMAT_VERSION), "heterofold_version": _library_version(),
        "texts": json.dumps(prefill.texts, ensure_ascii=False),
        "text_sha256": json.dumps([text_sha256(t) for t in prefill.texts]),
        "token_sha256": json.dumps(prefill.digests()),
        "sender": json.dumps(prefill.sender),
        "dtype": str(kept).removeprefix("torch."), "wire_dtype": str(wire).removeprefix("torch."),
        "cache_layers": json.dumps([_layer_record(layer) for layer in getattr(prefill.cache, "layers", [])]
                                   or [{"type": "DynamicLayer"}] * len(layers)),
        "payload_crc32": _crc32(tensors),
    }
    target = file_of(path)
    if target.parent.exists() and not target.parent.is_dir():
        raise HeteroFoldError(f"Cannot write {target}: {target.parent} is a file. Give a .safetensors path or a folder.")
    write_bytes_atomic(target, safetensors_bytes(tensors, metadata))
    return target


def _refuse(path: Path, why: str) -> IntegrityError:
    return IntegrityError(f"{path} is not a usable sender prefill file: {why}. Save the prefill again on the sender "
                          "side (prefill.save_pretrained(path)) and copy the whole file.")


def _read(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    if not path.is_file():
        where = " (a folder given holds the prefill as sender_prefill.safetensors)" if path.name == FILE_NAME else ""
        raise HeteroFoldError(f"No sender prefill file at {path}{where}. Pass the path prefill.save_pretrained wrote.")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            if metadata.get("format") != FORMAT:
                raise _refuse(path, f"it is a safetensors file but not a {FORMAT} file (format "
                                    f"{metadata.get('format')!r})")
            version = metadata.get("format_version")
            if version != str(FORMAT_VERSION):
                newer = version is not None and version.isdigit() and int(version) > FORMAT_VERSION
                raise IntegrityError(
                    f"{path} is a sender prefill file of format version {version}, but this heterofold-hub reads "
                    f"version {FORMAT_VERSION}. " + ("Upgrade heterofold-hub on this side (pip install -U "
                    "heterofold-hub)" if newer else "Save the prefill again with this version") + ".")
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except SafetensorError as err:
        raise _refuse(path, f"safetensors cannot read it ({err}); it is truncated or corrupted") from err
    except (OSError, RuntimeError) as err:
        raise _refuse(path, f"reading it failed ({type(err).__name__}: {err}); it is truncated or corrupted") from err
    return metadata, tensors


def load(cls, path: str | Path, *, sender=None):
    """The ``cls`` (:class:`~heterofold_hub.transfer.sender.SenderPrefill`, which imports this module) saved at
    ``path`` (a file, or a folder holding ``sender_prefill.safetensors``), its K/V back in the dtype it had when
    saved. ``sender``: the side the receiver maps from; a prefill made by another model is refused
    (:class:`PairMismatchError`). Other problems raise :class:`IntegrityError` naming the file and the fix."""
    path = file_of(path)
    metadata, tensors = _read(path)
    try:
        texts = json.loads(metadata["texts"])
        text_digests, token_digests = json.loads(metadata["text_sha256"]), json.loads(metadata["token_sha256"])
        made_by, records = json.loads(metadata["sender"]), json.loads(metadata["cache_layers"])
        kept, wire = WIRE_DTYPES[metadata["dtype"]], WIRE_DTYPES[metadata["wire_dtype"]]
        crc = metadata["payload_crc32"]
    except (KeyError, ValueError) as err:
        raise _refuse(path, f"its metadata is incomplete ({type(err).__name__}: {err})") from err
    if _crc32(tensors) != crc:
        raise _refuse(path, "its tensors do not match the checksum written with them (the file was altered or "
                            "corrupted in transit)")
    for row, text in enumerate(texts):
        if text_sha256(text) != text_digests[row]:
            raise _refuse(path, f"text {row} does not match its recorded digest")
    if sender is not None:
        problem = sender_problem(made_by, sender)
        if problem is not None:
            raise PairMismatchError(f"The sender prefill {path} is not a cache of this sender: {problem}. Load a "
                                    "prefill made by the sender this adapter maps from, or load the pair of the "
                                    "model that made it.")
    ids, mask = tensors["input_ids"], tensors["attention_mask"]
    spec = made_by["spec"]
    want = (len(texts), spec["kv_heads"], spec["head_dim"])
    for i in range(len(records)):
        for part in ("keys", "values"):
            tensor = tensors.get(f"layers.{i}.{part}")
            if tensor is None or tensor.dtype is not wire or (tensor.shape[0], tensor.shape[1], tensor.shape[3]) != want:
                raise _refuse(path, f"layer {i}'s {part} are missing or not {wire} tensors [B, Hs, Ts, Ds] of "
                                    f"B, Hs, Ds = {want}")
    if len(records) != spec["num_layers"]:
        raise _refuse(path, f"it holds {len(records)} layers, but its sender {made_by['id']!r} has {spec['num_layers']}")
    layers = [(tensors[f"layers.{i}.keys"].to(kept), tensors[f"layers.{i}.values"].to(kept))
              for i in range(len(records))]
    offsets = [tensors[f"offsets.{row}"] for row in range(len(texts))]
    prefill = cls(cache=_rebuild(layers, records), texts=texts, input_ids=ids, attention_mask=mask,
                            offsets=offsets, surprisal=tensors.get("surprisal"), sender=made_by,
                            wire_dtype=None if wire is kept else metadata["wire_dtype"])
    for row, digest in enumerate(prefill.digests()):
        if digest != token_digests[row] or len(offsets[row]) != int(mask[row].sum()):
            raise _refuse(path, f"the tokens of row {row} do not match their recorded digest")
    return prefill


def _rebuild(layers, records: list[dict]) -> DynamicCache:
    """A ``DynamicCache`` with each layer of the class it was saved from, adopting the tensors as they are."""
    cache = DynamicCache(ddp_cache_data=[(None, None)] * len(layers))
    for i, ((keys, values), record) in enumerate(zip(layers, records, strict=True)):
        if record["type"] == "DynamicSlidingWindowLayer":
            cache.layers[i] = DynamicSlidingWindowLayer(sliding_window=record["sliding_window"])
            cache.layers[i].cumulative_length = record["cumulative_length"]
        elif record["type"] != "DynamicLayer":
            raise IntegrityError(f"A prefill file names a cache layer of type {record['type']!r}; this version "
                                 f"rebuilds {', '.join(LAYER_TYPES)}. Upgrade heterofold-hub.")
        layer = cache.layers[i]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return cache

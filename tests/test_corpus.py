"""The evaluation text is disjoint from everything any fit reads, by content as well as by name."""

import pytest

from heterofold_hub.data.texts import read_texts, same_source, shared_passages
from heterofold_hub.zoo.corpus import CORPUS_DIR, load_records


def test_the_unseen_split_shares_no_passage_with_fitted_text():
    seen = read_texts("bundled:train") + read_texts("bundled:calib")
    assert shared_passages(seen, read_texts("bundled:unseen")) == []


def _package(record: dict) -> str:
    return record["source"].split("==")[0].lower()


@pytest.mark.parametrize("split", ["unseen", "wide"])
def test_the_third_party_splits_are_code_and_prose_with_their_licences(split):
    records = load_records(split)
    assert {r["kind"] for r in records} == {"code", "prose"}
    assert len(read_texts(f"bundled:{split}-code")) + len(read_texts(f"bundled:{split}-prose")) == len(records)
    for r in records:
        package = r["source"].split("==")[0]
        assert (CORPUS_DIR / "licenses" / f"{package}.txt").is_file(), package
        assert any(name in r["license"] for name in ("MIT", "BSD", "Apache")), r["license"]
        assert not r["source"].startswith(("synthetic/",)) and "/test" not in r["source"]
        assert "_vendor" not in r["source"]


def test_the_wide_training_split_is_disjoint_from_unseen_by_package_and_by_content():
    wide, unseen = load_records("wide"), load_records("unseen")
    assert {_package(r) for r in wide}.isdisjoint({_package(r) for r in unseen})
    assert shared_passages([r["text"] for r in wide], [r["text"] for r in unseen]) == []


def test_any_prefix_of_the_wide_split_mixes_code_and_prose():
    # make_windows takes documents round-robin in stored order: a small --windows must still see both kinds
    assert {r["kind"] for r in load_records("wide")[:20]} == {"code", "prose"}


def test_a_near_duplicate_is_caught_and_unrelated_text_is_not():
    original = read_texts("bundled:calib")[0]
    lines = original.splitlines()
    edited = "\n".join(lines[:10] + ["# an edit"] + lines[10:]).replace("self", "this", 1)
    assert shared_passages([original], [edited, read_texts("bundled:unseen")[0]]) == [0]


def test_two_spellings_of_one_file_are_the_same_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("{}")
    assert same_source("./x.jsonl", "x.jsonl") and same_source(str(tmp_path / "x.jsonl"), "x.jsonl")
    assert not same_source("bundled:train", "bundled:unseen") and same_source("bundled:train", "bundled:train")


def test_natural_and_retrieval_parts_partition_each_fitted_split():
    for split in ("train", "calib", "heldout"):
        whole = load_records(split)
        natural, retrieval = load_records(f"{split}-natural"), load_records(f"{split}-retrieval")
        assert len(natural) + len(retrieval) == len(whole) and natural and retrieval
        assert all(not r["source"].startswith("synthetic/") for r in natural)
        assert all(r["source"].startswith("synthetic/retrieval/") for r in retrieval)


def test_several_sources_joined_by_commas_are_read_in_turn(tmp_path):
    both = read_texts("bundled:wide-prose, bundled:calib-natural")
    assert both == read_texts("bundled:wide-prose") + read_texts("bundled:calib-natural")
    assert same_source("bundled:wide,bundled:unseen-code", "bundled:unseen-code")
    assert not same_source("bundled:wide,bundled:train-natural", "bundled:unseen")
    # a path that exists is one source, commas and all
    odd = tmp_path / "a,b.txt"
    odd.write_text("some text")
    assert read_texts(str(odd)) == ["some text"]


@pytest.mark.parametrize("source, message", [
    ("bundled:wide,,bundled:calib", "has an empty source between commas"),
    ("bundled:wide,bundled:wide", "names 'bundled:wide' twice"),
    ("bundled:wide,no/such/file.txt", "Data path 'no/such/file.txt' does not exist"),
])
def test_a_bad_list_of_sources_names_the_bad_one(source, message):
    from heterofold_hub.errors import HeteroFoldError

    with pytest.raises(HeteroFoldError, match=message):
        read_texts(source)


def test_training_on_several_sources_is_refused_when_one_is_the_held_out_text():
    from heterofold_hub.data.texts import trained_on_eval_text

    assert trained_on_eval_text("bundled:wide,bundled:unseen-prose", "bundled:unseen-prose")
    assert trained_on_eval_text("bundled:wide,bundled:unseen", "bundled:unseen-code")  # by shared passages
    assert not trained_on_eval_text("bundled:wide,bundled:calib-natural", "bundled:unseen")

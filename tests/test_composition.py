"""Pivot composition: A -> P and P -> B fold into one affine A -> B map that is exact at the layer level, runs the
same fast path, records and checks its provenance, and is what the resolver builds when no direct adapter fits."""

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from heterofold_hub import compose
from heterofold_hub.base_models.arch import kv_spec
from heterofold_hub.errors import HeteroFoldError, IntegrityError
from heterofold_hub.methods.fitting import fit_methods
from heterofold_hub.hub import LocalHub
from heterofold_hub.methods import get_method
from heterofold_hub.methods.composed import ComposedAdapter, training_data
from heterofold_hub.modeling import HeteroFoldModel
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.pipeline import TransferPipeline
from heterofold_hub.hub.publishing import push_package
from heterofold_hub.hub.registry import NoAdapterError, Registry
from heterofold_hub.hub.resolve import pair_end
from heterofold_hub.hub.composition import compose_path
from heterofold_hub.methods import load_adapter
from heterofold_hub.adapter.config import CONFIG_NAME, METRICS_NAME, WEIGHTS_NAME
from heterofold_hub.adapter.save_and_load import save_adapter

from conftest import bpe_tokenizer, tiny_model, unigram_tokenizer
from helpers import assert_same_cache, hf_fold, random_affine, reference_layers, small_calibration, texts


def features(adapter, layers: list[int], by_layer: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.cat([by_layer[kind][s] for s in layers], -1) for kind in "kv")


# (sender, pivot, receiver): different depths, KV head counts, head dims, and Gemma 3's sliding layers
TRIOS = [(("llama", 3), ("gemma3_text", 4), ("qwen2", 2)), (("gemma3_text", 5), ("llama", 3), ("gemma", 4)),
         (("phi3", 2), ("qwen2", 6), ("gpt_neox", 3))]


@pytest.mark.parametrize("trio", TRIOS, ids=lambda t: "-".join(a for a, _ in t))
@pytest.mark.parametrize("sources", [(1, 2), (2, 2), (3, 2)])
def test_composition_is_exact_at_the_layer_level(trio, sources):
    """For the same aligned sender features, the composed map equals the pivot map followed by the receiver map."""
    (a, la), (p, lp), (b, lb) = trio
    A, P, B = (tiny_model(arch, 100, layers=n, seed=i) for i, (arch, n) in enumerate(trio))
    first = random_affine(A, P, min(sources[0], la), seed=1)
    second = random_affine(P, B, min(sources[1], lp), seed=2, method="heterofold")
    composed = compose(first, second)
    width = kv_spec(A).kv_heads * kv_spec(A).head_dim
    by_layer = {kind: [torch.randn(3, 5, width, dtype=torch.float32) for _ in range(la)] for kind in "kv"}
    for r, pivot_layers in enumerate(second.config.layer_sources):
        pivot_kv = [first.map_layer(q, *features(first, first.config.layer_sources[q], by_layer)) for q in pivot_layers]
        want = second.map_layer(r, torch.cat([k for k, _ in pivot_kv], -1), torch.cat([v for _, v in pivot_kv], -1))
        got = composed.map_layer(r, *features(composed, composed.config.layer_sources[r], by_layer))
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert torch.allclose(g, w, atol=1e-5 * w.abs().max().item(), rtol=0), (g - w).abs().max()
    # each receiver layer reads exactly the union of its pivot layers' sources (padded with repeats)
    for r, union in enumerate(composed.config.extra["union_sources"]):
        assert union == sorted({s for q in second.config.layer_sources[r] for s in first.config.layer_sources[q]})
        assert set(composed.config.layer_sources[r]) == set(union)


def test_non_affine_or_mismatched_parents_are_refused():
    A, P, B = tiny_model("llama", 100, 3, 0), tiny_model("qwen2", 100, 2, 1), tiny_model("gemma", 100, 2, 2)
    dense = get_method("dense-latent")(replace(random_affine(A, P, 2, 0).config, method="dense-latent"))
    with pytest.raises(HeteroFoldError, match="dense-latent.*cannot be composed.*heterofold, kv-ridge"):
        compose(dense, random_affine(P, B, 1, 1))
    with pytest.raises(HeteroFoldError, match="do not meet at one pivot.*model id"):
        compose(random_affine(A, P, 2, 0), random_affine(A, B, 1, 1))


def test_composed_adapter_runs_the_fast_path_and_equals_the_reference(bpe, unigram):
    sender = Side.from_model(tiny_model("gemma3_text", len(bpe), layers=4, seed=1), bpe)
    receiver = Side.from_model(tiny_model("qwen2", len(unigram), layers=3, seed=2), unigram)
    pivot = tiny_model("llama", 100, layers=3, seed=3)
    composed = compose(random_affine(sender.model, pivot, 2, 4), random_affine(pivot, receiver.model, 2, 5))
    pipe = TransferPipeline(composed, sender, receiver)
    context = texts()[1][:300]
    from heterofold_hub.transfer.kvcache import full_cache

    with torch.no_grad():
        cache = sender.model(**bpe(context, return_tensors="pt"), use_cache=True, cache=full_cache()).cache
    result = pipe.transfer(cache, context)
    assert_same_cache(result.cache, reference_layers(pipe, cache, pipe.plan(context)), atol=1e-4)


# ---- packages, provenance and the resolver, on three tiny models saved as folders --------------------------------

LEG_METRICS = {"first": 0.8, "second": 0.7, "direct": 0.5}  # recorded qualities the ranking tests steer by


def metrics_for(adapter, recovered: float) -> dict:
    """A metrics.json for a test leg: these tiny random models have no context benefit to measure, so the
    recorded quality is set here to drive the resolver's ranking and min_recovered rules."""
    row = {"recovered": recovered, "recovered_se": 0.0, "kl": 0.1, "kl_se": 0.0, "top1": 0.5, "top1_se": 0.0,
           "nll": 1.0, "nll_se": 0.0}
    return {"sender": adapter.config.sender, "receiver": adapter.config.receiver, "context_tokens": 32,
            "continuation_tokens": 8, "windows": 4, "benefit": 0.5, "benefit_se": 0.1, "data": "bundled:unseen",
            "methods": {adapter.config.method: row}}


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """Models A (llama), P (Gemma 3, sliding) and B (qwen2) as folders; kv-ridge legs A -> P, P -> B and a direct
    A -> B fitted on real calibration windows, each saved as a package."""
    root = tmp_path_factory.mktemp("trio")
    specs = {"a": ("llama", bpe_tokenizer(), 3), "p": ("gemma3_text", bpe_tokenizer(260, bos=False), 4),
             "b": ("qwen2", unigram_tokenizer(), 2)}
    for i, (name, (arch, tok, layers)) in enumerate(specs.items()):
        model = tiny_model(arch, len(tok), layers=layers, seed=i)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    sides = {name: Side.load(str(root / name)) for name in specs}
    legs = {"first": ("a", "p"), "second": ("p", "b"), "direct": ("a", "b")}
    for leg, (s, r) in legs.items():
        windows, _ = small_calibration(sides[s], sides[r], context_tokens=32, windows=4)
        adapter = fit_methods(sides[s], sides[r], ["kv-ridge"], windows, batch_size=2)["kv-ridge"]
        from heterofold_hub.base_models.fingerprint import tokenizer_fingerprint

        # registered under hub-style ids; the folders loaded later match them by tokenizer and KV layout
        adapter.config = replace(adapter.config, sender=f"tester/{s}", receiver=f"tester/{r}",
                                 sender_tokenizer=tokenizer_fingerprint(sides[s].tokenizer),
                                 receiver_tokenizer=tokenizer_fingerprint(sides[r].tokenizer),
                                 training_args={"data": "bundled:train-natural"})
        save_adapter(adapter, root / leg)
        (root / leg / METRICS_NAME).write_text(json.dumps(metrics_for(adapter, LEG_METRICS[leg])))
    return root, sides


def publish(root: Path, tmp_path: Path, legs=("first", "second")) -> tuple[Path, Path]:
    registry, hub_dir = tmp_path / "registry.json", tmp_path / "hub"
    for leg in legs:
        push_package(root / leg, repo_id=f"tester/{leg}", version="1.0.0", hub=LocalHub(hub_dir),
                     registry=Registry.empty(registry) if not registry.exists() else registry)
    return registry, hub_dir


def test_from_pretrained_composes_a_path_when_no_direct_adapter_fits(trio, tmp_path, caplog):
    root, sides = trio
    registry, hub_dir = publish(root, tmp_path)
    a, b = str(root / "a"), str(root / "b")
    with pytest.raises(NoAdapterError) as miss:
        HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir)
    assert "a path exists via tester/p" in str(miss.value) and "pivot='auto'" in str(miss.value)
    with caplog.at_level(logging.WARNING, logger="heterofold_hub.hub.resolve"):
        model = HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="auto")
    assert "composed via" in caplog.text and "tester/first v1.0.0" in caplog.text
    assert model.resolved.path.pivot == "tester/p" and model.resolved.folder is None
    assert model.resolved.metrics["estimate"] == pytest.approx(0.8 * 0.7)
    parents = model.adapter.parents
    assert [(p.repo_id, p.version) for p in parents] == [("tester/first", "v1.0.0"), ("tester/second", "v1.0.0")]
    assert "composed via" in repr(model)
    pinned = HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="tester/p")
    assert pinned.adapter.pivot == "tester/p"
    with pytest.raises(NoAdapterError, match="no registered path through elsewhere"):
        HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="elsewhere")
    with pytest.raises(NoAdapterError, match="estimate below min_recovered 0.6"):
        HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="auto", min_recovered=0.6)
    # it transfers and generates like a direct adapter
    text = texts()[0][:200]
    with torch.no_grad():
        cache = sides["a"].model(**sides["a"].tokenizer(text, return_tensors="pt"), use_cache=True).cache
    assert model.generate(model.transfer(cache, text), max_new_tokens=2, min_new_tokens=2).shape == (1, 2)


def test_a_direct_adapter_wins_over_a_path_when_both_meet_min_recovered(trio, tmp_path):
    root, _ = trio
    registry, hub_dir = publish(root, tmp_path, legs=("first", "second", "direct"))
    a, b = str(root / "a"), str(root / "b")
    direct = HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="auto")
    assert direct.resolved.repo_id == "tester/direct" and direct.resolved.path is None
    # the direct one records 0.5, the path estimates 0.56: only the path meets 0.55
    path = HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="auto", min_recovered=0.55)
    assert path.resolved.path is not None


def test_miss_message_lists_paths_that_almost_exist(trio, tmp_path):
    root, _ = trio
    registry, hub_dir = publish(root, tmp_path, legs=("first",))
    with pytest.raises(NoAdapterError) as miss:
        HeteroFoldModel.from_pretrained(str(root / "a"), str(root / "b"), registry=registry, hub_dir=hub_dir,
                                        pivot="auto")
    text = str(miss.value)
    assert "almost a path via tester/p: tester/first exists" in text
    assert f"hf-fold train --sender tester/p --receiver {root / 'b'}" in text


def test_a_least_squares_first_leg_wins_over_a_better_recorded_calibrated_one(trio, tmp_path):
    """The second leg reads the pivot's own K/V, which a leg calibrated on the pivot's logits need not reproduce
    (benchmarks/probes/pivot_leg_error.py), so paths whose first leg is least-squares rank first."""
    root, sides = trio
    registry, hub_dir = publish(root, tmp_path)
    calibrated = load_adapter(root / "first")
    calibrated.config = replace(calibrated.config, method="heterofold")
    save_adapter(calibrated, tmp_path / "first-calibrated")
    (tmp_path / "first-calibrated" / METRICS_NAME).write_text(json.dumps(metrics_for(calibrated, 0.95)))
    push_package(tmp_path / "first-calibrated", repo_id="tester/first-calibrated", version="1.0.0",
                 hub=LocalHub(hub_dir), registry=registry)
    paths = Registry.load(registry).paths(pair_end(sides["a"]), pair_end(sides["b"]))
    assert [p.first.repo_id for p in paths] == ["tester/first", "tester/first-calibrated"]
    assert paths[0].estimate < paths[1].estimate  # 0.8 * 0.7 against 0.95 * 0.7: the method decides, not this
    assert "heterofold, not a least-squares fit" in paths[1].describe() and "expect less" not in paths[0].describe()
    model = HeteroFoldModel.from_pretrained(str(root / "a"), str(root / "b"), registry=registry, hub_dir=hub_dir,
                                            pivot="auto")
    assert model.adapter.parents[0].repo_id == "tester/first"
    composed = compose_path(sides["a"], sides["b"], via="tester/p", registry=Registry.load(registry), hub_dir=hub_dir)
    assert composed.parents[0].repo_id == "tester/first"


def test_compose_cli_writes_a_package_that_pushes_with_both_parents_on_its_card(trio, tmp_path):
    root, sides = trio
    registry, hub_dir = publish(root, tmp_path)
    out = tmp_path / "a2b"
    args = ["compose", "--sender", str(root / "a"), "--receiver", str(root / "b"), "--pivot", "tester/p", "--out", str(out), "--registry",
            str(registry), "--hub-dir", str(hub_dir), "--eval-windows", "2", "--context-tokens", "32",
            "--continuation-tokens", "8"]
    heldout = tmp_path / "heldout.txt"
    heldout.write_text(texts(8)[7])  # the standard library's textwrap, which the legs' bundled:train-natural holds
    seen = hf_fold(*args, "--heldout", str(heldout))
    assert seen.returncode == 2 and "A parent was trained on 'bundled:train-natural'" in seen.stderr
    assert not out.exists()
    run = hf_fold(*args, "--heldout", "bundled:unseen-prose")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "parent:" in run.stderr and "tester/second v1.0.0" in run.stderr  # what was composed: a message
    composed = load_adapter(out)
    assert isinstance(composed, ComposedAdapter) and composed.config.method == "composed"
    # its metrics.json holds what the library's evaluate gives the saved package on 2 held-out windows of 32 + 8
    from heterofold_hub.data.texts import read_texts
    from heterofold_hub.data.windows import make_windows
    from heterofold_hub.evaluation.fidelity import evaluate

    windows = make_windows(read_texts("bundled:unseen-prose"), sides["b"], max_windows=2, context_tokens=32,
                           continuation_tokens=8)
    direct = evaluate(sides["a"], sides["b"], {"composed": composed}, windows, data="bundled:unseen-prose")
    written = json.loads((out / METRICS_NAME).read_text())["methods"]["composed"]
    for key in ("recovered", "kl", "nll", "top1"):
        assert written[key] == pytest.approx(direct["methods"]["composed"][key], rel=1e-5, abs=1e-6), key
    assert training_data(composed.config) == ["bundled:train-natural", "bundled:train-natural"]
    push = hf_fold("push", str(out), "--repo", "tester/a2b-composed", "--version", "1.0.0", "--hub-dir", str(hub_dir),
                   "--registry", str(registry))
    assert push.returncode == 0, push.stdout + push.stderr
    published = next(e for e in Registry.load(registry).entries() if e.repo_id == "tester/a2b-composed").versions[-1]
    assert (published.metrics["data"], published.metrics["windows"]) == ("bundled:unseen-prose", 2)  # what it was scored on
    shown = hf_fold("show", "tester/a2b-composed", "--registry", str(registry))
    assert "bundled:unseen-prose, 2 x 32 tokens" in shown.stdout, shown.stdout
    card = (LocalHub(hub_dir).download("tester/a2b-composed", version="v1.0.0") / "README.md").read_text()
    assert "tester/first" in card and "tester/second" in card and "Composed from" in card
    # a registered composed adapter resolves like any other, its parents checked against the registry
    model = HeteroFoldModel.from_pretrained(str(root / "a"), str(root / "b"), registry=registry, hub_dir=hub_dir)
    assert model.resolved.repo_id == "tester/a2b-composed"


def test_provenance_is_checked_on_load_and_a_tampered_parent_is_refused(trio, tmp_path):
    root, _ = trio
    registry, hub_dir = publish(root, tmp_path)
    package = tmp_path / "composed"
    compose(load_adapter(root / "first"), load_adapter(root / "second"),
            first_ref={"repo_id": "tester/first", "version": "v1.0.0"},
            second_ref={"repo_id": "tester/second", "version": "v1.0.0"}).save_pretrained(package)
    a, b = str(root / "a"), str(root / "b")
    assert HeteroFoldModel.from_pretrained(a, b, adapter=package, registry=registry).adapter.pivot == "tester/p"

    # a parent recorded with other weights than the registry's version of it
    edited = tmp_path / "edited"
    shutil.copytree(package, edited)
    config = json.loads((edited / CONFIG_NAME).read_text())
    config["extra"]["parents"][1]["weights_sha256"] = "sha256:" + "0" * 64
    (edited / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(IntegrityError, match="records parent tester/second v1.0.0 with weights sha256:0000"):
        HeteroFoldModel.from_pretrained(a, b, adapter=edited, registry=registry)

    # provenance that does not chain sender -> pivot -> receiver is refused by load itself
    config["extra"]["parents"][0]["receiver"] = "someone-else"
    (edited / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(IntegrityError, match="do not chain sender -> pivot -> receiver"):
        load_adapter(edited)
    del config["extra"]["parents"]
    (edited / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(IntegrityError, match="extra.parents must list 2 parents"):
        load_adapter(edited)

    # a parent whose published weights were altered in the hub is refused before composing
    snapshot = LocalHub(hub_dir).download("tester/first", version="v1.0.0")
    weights = snapshot / WEIGHTS_NAME
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.chmod(0o644)
    weights.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="tester/first v1.0.0.*altered"):
        HeteroFoldModel.from_pretrained(a, b, registry=registry, hub_dir=hub_dir, pivot="auto")


def test_train_init_composed_calibrates_from_the_composition(trio, tmp_path):
    """``--init composed`` starts calibration from the composed map: with zero learning rate nothing moves, so the
    trained package equals the composition; the parents' training text stays on record for held-out checks."""
    root, _ = trio
    package = tmp_path / "composed"
    composed = compose(load_adapter(root / "first"), load_adapter(root / "second"))
    composed.save_pretrained(package)
    data = tmp_path / "train.txt"
    data.write_text(texts(6)[5])
    args = ["train", "--sender", str(root / "a"), "--receiver", str(root / "b"), "--data", str(data), "--heldout",
            "bundled:unseen-prose", "--context-tokens", "32", "--continuation-tokens", "8", "--windows", "4",
            "--calib-windows", "2", "--eval-windows", "2", "--max-steps", "2", "--init", "composed"]
    missing = hf_fold(*args, "--out", str(tmp_path / "x"))
    assert missing.returncode == 2 and "give --pivot PIVOT" in missing.stderr
    run = hf_fold(*args, "--init-adapter", str(package), "--lr", "1e-30", "--out", str(tmp_path / "trained"))
    assert run.returncode == 0, run.stdout + run.stderr
    trained = load_adapter(tmp_path / "trained")
    assert trained.config.method == "heterofold" and trained.config.extra["init"] == "composed"
    assert trained.config.layer_sources == composed.config.layer_sources
    for r in range(len(composed.config.layer_sources)):
        for got, want in zip(trained.affine_maps(r), composed.affine_maps(r)):
            assert torch.allclose(got[0], want[0], atol=1e-6) and torch.allclose(got[1], want[1], atol=1e-6)
    assert training_data(trained.config) == [str(data), "bundled:train-natural", "bundled:train-natural"]


def test_show_eval_and_bench_take_a_pivot(trio, tmp_path):
    root, sides = trio
    registry, hub_dir = publish(root, tmp_path)
    show = hf_fold("show", "--sender", "tester/a", "--receiver", "tester/b", "--pivot", "auto", "--json",
                   "--registry", str(registry))
    assert show.returncode == 0, show.stdout + show.stderr
    found = json.loads(show.stdout)
    assert found["direct"] == [] and [p["pivot"] for p in found["paths"]] == ["tester/p"]
    assert found["paths"][0]["estimate"] == pytest.approx(0.56)
    env = {"HF_FOLD_REGISTRY": str(registry), "HF_FOLD_HOME": str(hub_dir)}
    common = ["--sender", str(root / "a"), "--receiver", str(root / "b"), "--pivot", "auto"]
    scored = hf_fold("eval", *common, "--methods", "recolor", "--calib-data", "bundled:calib-natural", "--data",
                     "bundled:unseen-prose", "--windows", "2", "--calib-windows", "2", "--context-tokens", "32",
                     "--continuation-tokens", "8", "--json", str(tmp_path / "eval.json"), env=env)
    assert scored.returncode == 0, scored.stdout + scored.stderr
    rows = json.loads((tmp_path / "eval.json").read_text())
    assert "composed" in rows["methods"] and "via tester/p" in rows["adapters"]["composed"]
    timed = hf_fold("bench", *common, "--contexts", "24", "--repeats", "1", "--data", "bundled:unseen-prose",
                    "--json", str(tmp_path / "bench.json"), env=env)
    assert timed.returncode == 0, timed.stdout + timed.stderr
    bench = json.loads((tmp_path / "bench.json").read_text())
    row = bench["rows"][0]
    assert row["end_to_end_s"]["composed"] == pytest.approx(row["plan_s"] + row["transfer_s"]["composed"], rel=1e-9)
    # the row named composed timed the path's composition: its weights are the ones composing here gives
    from heterofold_hub.adapter.save_and_load import adapter_bytes, sha256_bytes

    composed = compose_path(sides["a"], sides["b"], via="tester/p", registry=Registry.load(registry), hub_dir=hub_dir)
    assert bench["provenance"]["adapters"]["composed"]["weights_sha256"] == sha256_bytes(adapter_bytes(composed))

"""The frontier's points (issue 48): which adapters and recompute settings it places, and where each coordinate of
each point is read (a file under benchmarks/results/, the stage and row in it). Names only: every figure comes from
its file, read and checked by :mod:`benchmarks.frontier`. A new adapter version or setting is a new :class:`Point`
here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Src:
    """One figure's place: ``file`` under benchmarks/results/, the experiment ``stage`` holding it (None: a history
    run's file, its JSON the result itself), and the ``row``: the method, package or setting name in it."""

    file: str
    stage: str | None
    row: str


@dataclass(frozen=True)
class Point:
    """One adapter (or baseline) with one recompute setting. ``setting`` is the hand-off's name for it
    (``transfer``: nothing recomputed; ``statement-tail@0.12``), ``map_dtype`` the products' dtype when not the
    adapter's own. ``recovered`` and ``speed`` are read at :data:`benchmarks.frontier.LENGTH`; ``kept`` per document
    format; ``elsewhere`` a recovered figure at another length, cited when 2048's is missing. ``plots``: which plots the point belongs on
    (selections that read the question have no fidelity figure)."""

    label: str
    group: str
    adapter: str
    setting: str = "transfer"
    map_dtype: str | None = None
    recovered: Src | None = None
    speed: Src | None = None
    kept: dict[str, Src] = field(default_factory=dict)
    elsewhere: Src | None = None
    plots: tuple[str, ...] = ("recovered", "kept")


def _score(experiment: str, row: str) -> Src:
    return Src(f"{experiment}.json", "score", row)


def _timed(experiment: str, row: str) -> Src:
    return Src(f"{experiment}.json", "handoff-speed", row)


def _bench(experiment: str, row: str) -> Src:
    return Src(f"{experiment}.json", "bench", row)


def _facts(code: str | None, prose: str | None, row: str) -> dict[str, Src]:
    return {fmt: Src(f"{experiment}.json", "handoff", row) for fmt, experiment in (("code", code), ("prose", prose))
            if experiment}


def _file(name: str, row: str) -> Src:
    return Src(name, None, row)


BF16 = " (bfloat16 maps)"  # a row timed or scored with the map's products in bf16 (map_dtype)
KNEE = "real-s2g-handoff-knee-bf16"  # one run timing v1.3.0's pure transfer and recompute, float32 and bf16 maps
TAIL = "handoff/fidelity-s2g-2048-tail"  # hf-fold eval --select tail: fidelity windows hold no question
G2S_TAIL = "handoff/fidelity-g2s-2048-tail"
# v1.1.0 timed again beside v1.2.0 (same machine, same hour), so the two versions' speed-ups compare
G2S_SPEED = "real-g2s-v110-handoff-speed-again"
V120_SPEED = "real-g2s-v120-handoff-speed"
V130_SPEED = "real-g2s-v130-handoff-speed-k07"  # v1.3.0's statement@0.05 (unscaled) timed beside its pure transfer
V130_BF16 = "real-g2s-v130-bf16"  # v1.3.0 with bf16 products, scored beside float32 in the same run
# v1.3.0's pure and recommended calls timed with float32 and bf16 products in one run, after the bf16 gathers and
# widening moved into the C kernels and the recompute began reading grouped KV heads in place
V130_KERNELS = "real-g2s-v130-handoff-speed-bf16"
V130_FACTS = "real-g2s-v130-handoff-2048"  # code and prose facts at 2048 tokens
V130_FACTS_BF16 = "real-g2s-v130-handoff-2048-bf16"  # the same documents, the products in bf16

DIRECTIONS = {  # direction -> (title, sender, receiver)
    "s2g": ("SmolLM2-135M -> Gemma 3 270M", "gguf/smollm2-135m-instruct-q4_1", "gguf/gemma3-270m-q4_k_m"),
    "g2s": ("Gemma 3 270M -> SmolLM2-135M", "gguf/gemma3-270m-q4_k_m", "gguf/smollm2-135m-instruct-q4_1"),
}
S2G = "heterofold/smollm2-135m-to-gemma3-270m@"
G2S = "heterofold/gemma3-270m-to-smollm2-135m@"
V130, V110 = ("heterofold v1.3.0", S2G + "v1.3.0"), ("heterofold v1.1.0", G2S + "v1.1.0")  # (group, adapter)
V140 = ("heterofold v1.4.0", S2G + "v1.4.0")
V140_SPEED, V140_FACTS = "real-s2g-v140-handoff-speed", "real-s2g-v140-handoff"  # its call timed; facts at 2048
V140_KERNELS = "real-s2g-v140-handoff-speed-bf16"  # as V130_KERNELS, for v1.4.0
V140_TAIL = "real-s2g-v140-handoff-speed-tail"  # v1.4.0 with a 4-6% recent tail, float32 and bf16 products
V120 = ("heterofold v1.2.0", G2S + "v1.2.0")
V130_G2S = ("heterofold v1.3.0", G2S + "v1.3.0")
V140RC2 = "real-g2s-v140rc2"  # trains v1.4.0-rc.2 and scores it beside v1.4.0-rc.1 and v1.3.0
V140_G2S = ("heterofold v1.4.0", G2S + "v1.4.0")  # v1.4.0-rc.2's package, promoted
V140RC2_SPEED = "real-g2s-v140rc2-handoff-speed"  # timed on an AVX2 EPYC, float32 products
V140RC2_CODE = "real-g2s-v140rc2-handoff-2048-code"  # code facts at 2048 tokens
V140RC2_PROSE = "real-g2s-v140rc2-handoff-2048-prose"  # prose facts at 2048 tokens
RANK64 = ("rank 64 v1.0.0", "heterofold/gemma3-270m-to-smollm2-135m-rank64@v1.0.0")

# History runs are named by their training run; the version each was published as is the results pages' (fidelity.md,
# history.md): s2g-natural v1.0.0, s2g-wide v1.1.0, s2g-wide2 v1.2.0 (their 512-token runs equal the registry's
# evaluations of those versions).
POINTS = {
    "s2g": [
        Point("v1.4.0", *V140, recovered=_score("real-s2g-levers-long", "heterofold"),
              speed=_timed(V140_KERNELS, "transfer"), kept=_facts(V140_FACTS, V140_FACTS, "transfer")),
        Point("v1.4.0 bf16", *V140, map_dtype="bfloat16", recovered=_score("real-s2g-v140-bf16", "heterofold" + BF16),
              speed=_timed(V140_KERNELS, "transfer" + BF16)),
        Point("v1.4.0 statement 5%", *V140, "statement@0.05", speed=_timed(V140_SPEED, "statement@0.05"),
              kept=_facts(V140_FACTS, V140_FACTS, "statement@0.05")),
        Point("v1.4.0 statement 5% k0.7", *V140, "statement@0.05 k0.7",
              speed=_timed(V140_KERNELS, "statement@0.05 k0.7"),
              kept=_facts(V140_FACTS, V140_FACTS, "statement@0.05 k0.7")),
        Point("v1.4.0 statement 5% k0.7 bf16", *V140, "statement@0.05 k0.7", "bfloat16",
              speed=_timed(V140_KERNELS, "statement@0.05 k0.7" + BF16)),
        *[Point(f"v1.4.0 tail {share}% bf16", *V140, f"statement-tail@0.0{share}", "bfloat16",
                recovered=_file(f"{TAIL}{share}-v140-bf16.json", "heterofold" + BF16),
                speed=_timed(V140_TAIL, f"statement-tail@0.0{share}" + BF16)) for share in (4, 5)],
        Point("v1.3.0", *V130, recovered=_score("real-s2g", "heterofold"), speed=_timed(KNEE, "transfer"),
              kept=_facts("real-s2g-handoff-2048-statement", "real-s2g-handoff-2048-statement-prose", "transfer")),
        Point("v1.3.0 bf16", *V130, map_dtype="bfloat16", recovered=_score("real-s2g-bf16-maps", "heterofold" + BF16),
              speed=_timed(KNEE, "transfer" + BF16),
              kept=_facts("real-s2g-handoff-knee12-bf16-2048", "real-s2g-handoff-knee12-bf16-2048", "transfer")),
        Point("statement 5%", *V130, "statement@0.05", speed=_timed(KNEE, "statement@0.05"),
              kept=_facts("real-s2g-handoff-2048-statement", "real-s2g-handoff-2048-statement-prose",
                          "statement@0.05")),
        Point("statement 5% bf16", *V130, "statement@0.05", "bfloat16", speed=_timed(KNEE, "statement@0.05" + BF16)),
        Point("tail 5%", *V130, "statement-tail@0.05", recovered=_file(TAIL + "5.json", "heterofold"),
              speed=_timed("real-s2g-handoff-speed-tail", "statement-tail@0.05")),
        Point("tail 10%", *V130, "statement-tail@0.1", recovered=_file(TAIL + "10.json", "heterofold"),
              speed=_timed(KNEE, "statement-tail@0.1")),
        Point("tail 10% bf16", *V130, "statement-tail@0.1", "bfloat16",
              speed=_timed(KNEE, "statement-tail@0.1" + BF16)),
        Point("tail 12%", *V130, "statement-tail@0.12", recovered=_file(TAIL + "12-bf16.json", "heterofold"),
              speed=_timed(KNEE, "statement-tail@0.12")),
        Point("tail 12% bf16", *V130, "statement-tail@0.12", "bfloat16",
              recovered=_file(TAIL + "12-bf16.json", "heterofold" + BF16),
              speed=_timed(KNEE, "statement-tail@0.12" + BF16),
              kept=_facts("real-s2g-handoff-knee12-bf16-2048", "real-s2g-handoff-knee12-bf16-2048",
                          "statement-tail@0.12")),
        Point("tail 15%", *V130, "statement-tail@0.15", recovered=_file(TAIL + "15.json", "heterofold"),
              speed=_timed(KNEE, "statement-tail@0.15"),
              kept=_facts("real-s2g-handoff-knee-2048", "real-s2g-handoff-knee-prose-2048", "statement-tail@0.15")),
        Point("tail 15% bf16", *V130, "statement-tail@0.15", "bfloat16",
              speed=_timed(KNEE, "statement-tail@0.15" + BF16)),
        Point("tail 20%", *V130, "statement-tail@0.2",
              speed=_timed("real-s2g-handoff-speed-tail", "statement-tail@0.2"),
              elsewhere=_file("handoff/fidelity-s2g-512-tail20.json", "heterofold")),
        *[Point(label, *V130, name, speed=_timed("real-s2g-handoff-speed", name), plots=("kept",),
                kept=_facts("real-s2g-handoff-2048", "real-s2g-handoff-2048", name))
          for label, name in (("keywords 2%", "keywords@0.02"), ("keywords 5%", "keywords@0.05"),
                              ("query 2%", "query@0.02"))],
        *[Point(version, f"heterofold {version}", S2G + version, plots=("recovered",),
                recovered=_file(f"real/fidelity-s2g-2048{run}.json", "heterofold"))
          for version, run in (("v1.2.0", "-wide2"), ("v1.1.0", "-wide"), ("v1.0.0", ""))],
        Point("rank 64", "rank 64 of v1.3.0 (unpublished)", "compress:rank64 of real-s2g-low-rank",
              plots=("recovered",),
              recovered=_score("real-s2g-low-rank", "low-rank"), speed=_bench("real-s2g-low-rank", "rank64")),
        Point("KV Ridge", "KV Ridge", "kv-ridge", recovered=_score("real-s2g", "kv-ridge"),
              speed=_bench("real-bench", "kv-ridge"), plots=("recovered",)),
        Point("Dense Latent", "Dense Latent", "dense-latent", speed=_bench("real-bench", "dense-latent"),
              elsewhere=_file("real/fidelity-s2g-512-dense-latent.json", "dense-latent"), plots=("recovered",)),
    ],
    "g2s": [
        Point("v1.3.0", *V130_G2S, recovered=_score("real-g2s-levers-long", "heterofold"),
              speed=_timed(V130_KERNELS, "transfer"), kept=_facts(V130_FACTS, V130_FACTS, "transfer")),
        Point("v1.3.0 bf16", *V130_G2S, map_dtype="bfloat16", recovered=_score(V130_BF16, "heterofold" + BF16),
              speed=_timed(V130_KERNELS, "transfer" + BF16),
              kept=_facts(V130_FACTS_BF16, V130_FACTS_BF16, "transfer")),
        Point("v1.3.0 statement 5%", *V130_G2S, "statement@0.05", speed=_timed(V130_SPEED, "statement@0.05"),
              kept=_facts(V130_FACTS, V130_FACTS, "statement@0.05")),
        Point("v1.3.0 statement 5% k0.7", *V130_G2S, "statement@0.05 k0.7",
              speed=_timed(V130_KERNELS, "statement@0.05 k0.7"),
              kept=_facts(V130_FACTS, V130_FACTS, "statement@0.05 k0.7")),
        Point("v1.3.0 statement 5% k0.7 bf16", *V130_G2S, "statement@0.05 k0.7", "bfloat16",
              speed=_timed(V130_KERNELS, "statement@0.05 k0.7" + BF16),
              kept=_facts(V130_FACTS_BF16, V130_FACTS_BF16, "statement@0.05 k0.7")),
        # v1.4.0 (v1.4.0-rc.2 promoted) and the pre-release rc.1, scored beside v1.3.0 on the same windows
        Point("v1.4.0", *V140_G2S, recovered=_score(V140RC2, "heterofold"),
              speed=_timed(V140RC2_SPEED, "transfer"), kept=_facts(V140RC2_CODE, V140RC2_PROSE, "transfer")),
        Point("v1.4.0 statement 5% k0.7", *V140_G2S, "statement@0.05 k0.7",
              speed=_timed(V140RC2_SPEED, "statement@0.05 k0.7"),
              kept=_facts(V140RC2_CODE, V140RC2_PROSE, "statement@0.05 k0.7")),
        Point("v1.4.0-rc.1", "heterofold v1.4.0-rc.1 (pre-release)", G2S + "v1.4.0-rc.1",
              recovered=_score(V140RC2, "heterofold (v1.4.0-rc.1)")),
        Point("v1.2.0", *V120, recovered=_score("real-g2s-levers-all", "heterofold"),
              speed=_timed(V120_SPEED, "transfer")),
        Point("v1.2.0 statement 5%", *V120, "statement@0.05", speed=_timed(V120_SPEED, "statement@0.05")),
        Point("v1.1.0", *V110, recovered=_score("real-g2s", "heterofold"), speed=_timed(G2S_SPEED, "transfer"),
              kept=_facts("real-g2s-handoff-2048", None, "transfer")),
        Point("v1.1.0 bf16", *V110, map_dtype="bfloat16", recovered=_score("real-g2s-bf16-maps", "heterofold" + BF16),
              speed=_bench("real-g2s-bf16-maps", "heterofold" + BF16)),
        Point("statement 5%", *V110, "statement@0.05", speed=_timed(G2S_SPEED, "statement@0.05"),
              kept=_facts("real-g2s-handoff-2048", None, "statement@0.05")),
        Point("tail 5%", *V110, "statement-tail@0.05"),
        Point("tail 10%", *V110, "statement-tail@0.1", recovered=_file(G2S_TAIL + "10.json", "heterofold")),
        Point("tail 12%", *V110, "statement-tail@0.12", recovered=_file(G2S_TAIL + "12-bf16.json", "heterofold")),
        Point("tail 12% bf16", *V110, "statement-tail@0.12", "bfloat16",
              recovered=_file(G2S_TAIL + "12-bf16.json", "heterofold" + BF16)),
        Point("tail 15%", *V110, "statement-tail@0.15", recovered=_file(G2S_TAIL + "15.json", "heterofold")),
        Point("tail 20%", *V110, "statement-tail@0.2"),
        Point("v1.0.0", "heterofold v1.0.0", G2S + "v1.0.0", recovered=_score("real-g2s-natural", "heterofold"),
              plots=("recovered",)),
        Point("rank 64", *RANK64, recovered=_score("real-g2s-rank64-bf16", "low-rank"),
              speed=_bench("real-g2s-rank64-bf16", "v1.0.0"), plots=("recovered",)),
        Point("rank 64 bf16", *RANK64, map_dtype="bfloat16",
              recovered=_score("real-g2s-rank64-bf16", "low-rank" + BF16),
              speed=_bench("real-g2s-rank64-bf16", "v1.0.0" + BF16), plots=("recovered",)),
        Point("KV Ridge", "KV Ridge", "kv-ridge", recovered=_score("real-g2s-natural", "kv-ridge"),
              speed=_bench("real-bench", "kv-ridge"), plots=("recovered",)),
        Point("Dense Latent", "Dense Latent", "dense-latent", recovered=_score("real-g2s-natural", "dense-latent"),
              speed=_bench("real-bench", "dense-latent"), plots=("recovered",)),
    ],
}

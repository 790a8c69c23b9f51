"""The frontier (issue 48): per direction of the real pair, the end-to-end speed-up over the receiver's own prefill at
2048 tokens against what the receiver keeps, one point per adapter and recompute setting, from committed results.

Two plots a direction: the context benefit kept (``recovered``, fidelity windows of ``bundled:unseen``) and retrieval
kept (exact answers as a share of native prefill's, hand-off documents at 2048 tokens, code and prose). Which points,
and where each coordinate is read, is :mod:`benchmarks.frontier_points` (a new adapter version or setting is a new
``Point`` there); this module reads and checks each figure from its file, places the points, and writes the page and
plots. A point without one of its coordinates is left off that plot and listed on the page with what would measure
it.

    python -m benchmarks report           # writes docs/results/frontier.md and its plots, beside the other pages
    python -m benchmarks report --check   # ... and holds them to the files (a plot by a digest of its points)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks import config
from benchmarks.frontier_points import BF16, DIRECTIONS, POINTS, Point, Src

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = "docs/results/frontier.md"  # relative to the repository root; the plots are written beside it
LENGTH = 2048  # receiver tokens; a hand-off document may land a token or two short (2047)
DATA = "bundled:unseen"
FORMATS = ("code", "prose")
MEASURES = {"recovered": "context benefit kept (recovered)", "kept": "retrieval kept (exact match / native)"}
ASSETS = "../assets/results/"  # where the site serves benchmarks/results/ from a results page (docs/hooks.py)




@dataclass(frozen=True)
class Figure:
    """One coordinate as its file gives it: ``value``; ``src``, where it is; ``detail``, what the table says beside
    it; ``reference``: for a speed-up, that run's pure transfer of the full map; for ``recovered``, the benefit of
    the context on its windows (equal benefits: the same windows); ``data``: the text it was measured on, where
    the file or its experiment's config says; ``cpu``: for a speed-up, the CPU model that timed it, where its run's
    provenance records one (the same call's speed-up differs from one CPU to another)."""

    value: float
    src: Src
    detail: str = ""
    reference: float | None = None
    data: str | None = None
    cpu: str | None = None


class Reader:
    """Figures from a results folder (each file parsed once), each checked to be of the direction's pair, at
    :data:`LENGTH` tokens and on :data:`DATA` where its file says which text."""

    def __init__(self, results: Path = RESULTS, experiments: Path = config.EXPERIMENTS):
        self.results, self.experiments, self._files = Path(results), Path(experiments), {}

    def result(self, src: Src) -> dict:
        """The result a source names: its file's JSON, or the experiment stage's result in it."""
        if src.file not in self._files:
            path = self.results / src.file
            if not path.is_file():
                raise ValueError(f"{path} does not exist: a frontier point reads {src.row!r} from it")
            self._files[src.file] = json.loads(path.read_text())
        data = self._files[src.file]
        if src.stage is None:
            return data
        if src.stage not in data.get("stages", {}):
            raise ValueError(f"{src.file} has no {src.stage!r} stage; it has {', '.join(data.get('stages', {}))}")
        return data["stages"][src.stage]["result"]

    def recovered(self, src: Src, direction: str, length: int | None = LENGTH) -> Figure:
        """``recovered`` of one row of a fidelity table (an experiment's ``score`` at ``length``, or a history run's
        file); ``length=None``: at whatever length the file holds."""
        result = self.result(src)
        if src.stage == "score":
            key = str(length) if length else next(iter(result))
            if key not in result:
                raise ValueError(f"{src.file}'s score stage has no {key}-token table; it has {', '.join(result)}")
            result = result[key]
        _check_pair(result, direction, src)
        if length and result["context_tokens"] != length:
            raise ValueError(f"{src.file} scores {result['context_tokens']} tokens, not {length}")
        data = result.get("data") or self._score_data(src)
        if data not in (None, DATA):
            raise ValueError(f"{src.file} scores {data}, not {DATA}")
        row = _row(result["methods"], src)
        return Figure(row["recovered"], src, f"± {row['recovered_se']:.3f}, {result['windows']} windows"
                      + ("" if length else f", {result['context_tokens']} tokens"), result["benefit"], data)

    def speedup(self, src: Src, direction: str) -> Figure:
        """End to end over the receiver's own prefill at :data:`LENGTH`: a ``handoff-speed`` setting (the user's call:
        plan + map + selection + recompute) or a ``bench`` row (warm plan + map)."""
        result = self.result(src)
        if isinstance(result.get("lengths"), dict):  # handoff-speed: rows keyed by the document's receiver tokens
            _check_pair(result, direction, src)
            key = _near(result["lengths"], src)
            settings = result["lengths"][key]["settings"]
            return Figure(_row(settings, src)["speedup"], src, f"{key} tokens", settings["transfer"]["speedup"],
                          cpu=self.cpu(src))
        directions = result.get("directions", [result])
        found = [d for d in directions if (d["sender"], d["receiver"]) == DIRECTIONS[direction][1:]]
        if not found:
            raise ValueError(f"{src.file} times no {DIRECTIONS[direction][0]} direction")
        rows = [r for r in found[0]["rows"] if r["context_tokens"] == LENGTH]
        if not rows or "speedup" not in rows[0]:
            raise ValueError(f"{src.file} has no end-to-end speed-up at {LENGTH} tokens")
        end_to_end = rows[0]["speedup"]["end_to_end"]
        return Figure(_row(end_to_end, src), src, f"{LENGTH} tokens", end_to_end.get("heterofold"), cpu=self.cpu(src))

    def kept(self, src: Src, fmt: str, direction: str) -> Figure:
        """Retrieval kept: one setting's exact answers over native prefill's, on ``fmt`` documents at :data:`LENGTH`."""
        result = self.result(src)
        _check_pair(result, direction, src)
        if result.get("data", DATA) != DATA:
            raise ValueError(f"{src.file} draws its documents from {result['data']}, not {DATA}")
        if fmt not in result["formats"]:
            raise ValueError(f"{src.file} has no {fmt} documents; it has {', '.join(result['formats'])}")
        rows = result["formats"][fmt]
        row = _row(rows[_near(rows, src)], src)
        return Figure(row["kept"], src, f"{row['correct']}/{row['n']} exact", data=result.get("data"))

    def cpu(self, src: Src) -> str | None:
        """The CPU model the run that made ``src`` recorded in its provenance (None where it recorded none)."""
        self.result(src)
        data = self._files[src.file]
        made = data["stages"][src.stage] if src.stage else data
        return ((made.get("provenance") or {}).get("cpu") or {}).get("model")

    def _score_data(self, src: Src) -> str | None:
        """The text an experiment's score stage read, from its config, when its file does not record it."""
        if src.stage != "score":
            return None
        try:
            return config.load(Path(src.file).stem, self.experiments).score.data
        except (config.ConfigError, AttributeError):
            return None


def _check_pair(result: dict, direction: str, src: Src) -> None:
    pair = DIRECTIONS[direction][1:]
    if (result.get("sender"), result.get("receiver")) != pair:
        raise ValueError(f"{src.file} is {result.get('sender')} -> {result.get('receiver')}, not {' -> '.join(pair)}")


def _row(rows: dict, src: Src):
    if src.row not in rows:
        raise ValueError(f"{src.file} has no row {src.row!r}; it has {', '.join(rows)}")
    return rows[src.row]


def _near(rows: dict, src: Src, slack: float = 0.01) -> str:
    """The key of ``rows`` (receiver tokens) within ``slack`` of :data:`LENGTH`: a hand-off document targets the
    length and may land a token short."""
    keys = [k for k in rows if abs(int(k) - LENGTH) <= slack * LENGTH]
    if not keys:
        raise ValueError(f"{src.file} has no row near {LENGTH} tokens; it has {', '.join(rows)}")
    return keys[0]


@dataclass
class Placed:
    """A point with the figures its sources give (None: no source)."""

    point: Point
    recovered: Figure | None
    speed: Figure | None
    kept: dict[str, Figure]
    elsewhere: Figure | None


def _check_dtype(point: Point, src: Src, narrow: bool) -> None:
    """A point's map dtype must be its source's: a row named ``... (bfloat16 maps)``, or a bf16 hand-off run."""
    if narrow != (point.map_dtype is not None):
        own = "the adapter's own dtype"
        raise ValueError(f"{point.label!r} ({point.map_dtype or own}) reads {src.file} {src.row!r}, which is "
                         f"{'bf16 maps' if narrow else own}")


def build(reader: Reader | None = None, points: dict[str, list[Point]] = POINTS) -> dict[str, list[Placed]]:
    """Every point of every direction with its figures. A direction's ``recovered`` figures must share their
    windows (one benefit of the context, to float rounding), so that they compare."""
    reader = reader or Reader()
    out = {}
    for direction, declared in points.items():
        placed = []
        for p in declared:
            for src in filter(None, (p.recovered, p.speed)):
                _check_dtype(p, src, src.row.endswith(BF16))
            for src in p.kept.values():
                _check_dtype(p, src, reader.result(src).get("map_dtype") is not None)
            placed.append(Placed(
                p, p.recovered and reader.recovered(p.recovered, direction),
                p.speed and reader.speedup(p.speed, direction),
                {fmt: reader.kept(src, fmt, direction) for fmt, src in p.kept.items()},
                p.elsewhere and reader.recovered(p.elsewhere, direction, length=None)))
        benefits = [(q.recovered.reference, q.recovered.src.file) for q in placed if q.recovered]
        for benefit, file in benefits[1:]:
            if abs(benefit - benefits[0][0]) > 1e-4 * abs(benefits[0][0]):
                raise ValueError(f"{file} was not scored on the windows of {benefits[0][1]} (benefit {benefit:.4f}, "
                                 f"not {benefits[0][0]:.4f}): its recovered does not compare")
        out[direction] = placed
    return out


@dataclass(frozen=True)
class Shown:
    """One marker of a plot: the point, the document format (``kept`` only) and its coordinates' figures."""

    placed: Placed
    fmt: str | None
    x: Figure
    y: Figure

    @property
    def label(self) -> str:
        return self.placed.point.label


def shown(placed: list[Placed], measure: str) -> list[Shown]:
    """The markers of one plot (``measure``: ``recovered`` or ``kept``): the points on it with both coordinates."""
    out = []
    for q in placed:
        if measure not in q.point.plots or q.speed is None:
            continue
        if measure == "recovered" and q.recovered:
            out.append(Shown(q, None, q.speed, q.recovered))
        if measure == "kept":
            out += [Shown(q, fmt, q.speed, q.kept[fmt]) for fmt in FORMATS if fmt in q.kept]
    return out


def on_frontier(markers: list[Shown]) -> set[int]:
    """The indices of the markers no other marker (of the same format) beats on both axes: the frontier."""
    return {i for i, a in enumerate(markers)
            if not any(b.fmt == a.fmt and b.x.value >= a.x.value and b.y.value >= a.y.value
                       and (b.x.value, b.y.value) != (a.x.value, a.y.value) for b in markers)}


def missing(placed: list[Placed], measure: str) -> list[tuple[Placed, list[tuple[str, str | None]]]]:
    """The points of a plot left off it, each with what it lacks: (``recovered``, None), (``speed``, None) or
    (``kept``, a document format)."""
    out = []
    for q in placed:
        if measure not in q.point.plots:
            continue
        if measure == "recovered":
            lacks = [] if q.recovered else [("recovered", None)]
        else:
            lacks = [("kept", fmt) for fmt in FORMATS if fmt not in q.kept]
        lacks += [] if q.speed else [("speed", None)]
        if lacks:
            out.append((q, lacks))
    return out


def how(point: Point, lacks: str, formats: tuple[str, ...] = ()) -> str:
    """What would measure a point's missing coordinate (``recovered``, ``speed`` or ``kept``, with the point's
    adapter): an experiment stage, or the command the committed files of its kind came from."""
    narrow = f', `map_dtype = "{point.map_dtype}"`' if point.map_dtype else ""
    grid = f'`grid = "{point.setting.replace("@", ":")}"`'
    if lacks == "recovered":
        select, _, share = point.setting.partition("@")
        if point.adapter in ("kv-ridge", "dense-latent"):
            return f"a `score` stage at `contexts = [{LENGTH}]` scoring a `train:{point.adapter}` package"
        if point.setting == "transfer":
            return f"a `score` stage at `contexts = [{LENGTH}]`{narrow}"
        if select != "statement-tail":
            return f"none: `hf-fold eval` refuses `--select {select}` (fidelity windows hold no question)"
        dtype = f" --map-dtype {point.map_dtype}" if point.map_dtype else ""
        return f"`hf-fold eval --context-tokens {LENGTH} --windows 16 --recompute {share} --select tail{dtype}`"
    if lacks == "speed":
        if point.setting == "transfer":
            return f"a `bench` stage at `contexts = [{LENGTH}]` with the adapter among its `adapters`{narrow}"
        return f"a `handoff-speed` stage, {grid}{narrow}"
    if point.setting == "transfer":
        grid = "any `grid` (the pure transfer is always its first row)"
    return f"a `handoff` stage, {grid}, `lengths = [{LENGTH}]`, `formats = {json.dumps(list(formats))}`{narrow}"


def plot_name(direction: str, measure: str) -> str:
    """The plot's file name, beside the page: ``frontier-s2g.png``, ``frontier-s2g-retrieval.png``."""
    return f"frontier-{direction}{'' if measure == 'recovered' else '-retrieval'}.png"


def plot_title(direction: str, measure: str) -> str:
    return f"{DIRECTIONS[direction][0]}, {LENGTH} tokens\n{MEASURES[measure]} against end-to-end speed-up"


def _link(figure: Figure, fmt: str | None = None) -> str:
    """The file a figure comes from (linked where the site serves it), its stage, table and row."""
    src = figure.src
    where = {"score": f" `score` {LENGTH},", "handoff": f" `handoff` {fmt},", "handoff-speed": " `handoff-speed`,",
             "bench": " `bench`,", None: ""}[src.stage]
    return f"[{Path(src.file).name}]({ASSETS}{src.file}){where} `{src.row}`"


def _setting(point: Point, measure: str) -> str:
    """The setting as the table states it: the hand-off's name, the map dtype, and what fidelity windows ran."""
    name = "pure transfer" if point.setting == "transfer" else f"`{point.setting}`"
    if measure == "recovered" and point.setting.startswith("statement-tail@"):
        name += f" (fidelity: `tail@{point.setting.partition('@')[2]}`)"
    return name + (", bf16 maps" if point.map_dtype else "")


def _speed(figure: Figure) -> str:
    tokens = figure.detail.split()[0]
    return f"{figure.value:.1f}x" + ("" if tokens == str(LENGTH) else f" ({tokens} tokens)")


def _reference(figure: Figure) -> str:
    return "—" if figure.reference is None else f"{figure.reference:.1f}x"


def table(markers: list[Shown], measure: str) -> str:
    """One plot's points: each coordinate with the file, stage and row it comes from, the pure transfer of the run
    that timed it, and whether it is on the frontier."""
    best = on_frontier(markers)
    y_head = "recovered" if measure == "recovered" else "facts kept"
    lines = [f"| adapter | point | setting |{' format |' if measure == 'kept' else ''} {y_head} | from | "
             "speed-up | from | that run's pure transfer | timed on | frontier |",
             "| --- | --- | --- |" + (" --- |" if measure == "kept" else "")
             + " ---: | --- | ---: | --- | ---: | --- | :---: |"]
    for i, m in enumerate(markers):
        p = m.placed.point
        y = (f"{m.y.value:.3f} {m.y.detail}" if measure == "recovered" else f"{m.y.value:.2f} ({m.y.detail})")
        cells = [p.group, p.label, _setting(p, measure)] + ([m.fmt] if measure == "kept" else [])
        cells += [y, _link(m.y, m.fmt), _speed(m.x), _link(m.x), _reference(m.x), m.x.cpu or "not recorded",
                  "yes" if i in best else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def missing_table(placed: list[Placed], measure: str) -> str:
    """The points a plot leaves off: what each has, and what would measure what it lacks."""
    lines = ["| adapter | point | setting | has | lacks: would be measured by |", "| --- | --- | --- | --- | --- |"]
    for q, lacks in missing(placed, measure):
        p, has = q.point, []
        if measure == "recovered" and q.recovered:
            has.append(f"recovered {q.recovered.value:.3f} ({_link(q.recovered)})")
        if measure == "recovered" and not q.recovered and q.elsewhere:
            has.append(f"recovered {q.elsewhere.value:.3f} at {q.elsewhere.detail.rsplit(', ', 1)[1]} only "
                       f"({_link(q.elsewhere)})")
        has += [f"{fmt} facts kept {q.kept[fmt].value:.2f} ({_link(q.kept[fmt], fmt)})"
                for fmt in FORMATS if measure == "kept" and fmt in q.kept]
        if q.speed:
            has.append(f"speed-up {_speed(q.speed)} ({_link(q.speed)})")
        formats = tuple(fmt for what, fmt in lacks if what == "kept")
        needs = [f"{what}: {how(p, what)}" for what, _ in lacks if what != "kept"]
        if formats:
            needs.insert(0, f"{', '.join(formats)} facts kept: {how(p, 'kept', formats)}")
        lines.append(f"| {p.group} | {p.label} | {_setting(p, measure)} | {'; '.join(has) or 'nothing at 2048'} | "
                     + "; ".join(needs) + " |")
    return "\n".join(lines)


def _ends(markers: list[Shown]) -> str:
    """The frontier's two ends: its fastest point and its most faithful one."""
    best = sorted((m for i, m in enumerate(markers) if i in on_frontier(markers)), key=lambda m: m.x.value)
    fast, slow = best[-1], best[0]
    return (f"the frontier runs from {fast.label} ({fast.y.value:.3f} at {fast.x.value:.1f}x) to {slow.label} "
            f"({slow.y.value:.3f} at {slow.x.value:.1f}x)")


def _facts_line(markers: list[Shown], bar: float = 0.9) -> str:
    """The fastest setting keeping at least ``bar`` of native's exact answers on code facts, or the best one."""
    code = [m for m in markers if m.fmt == "code"]
    if not code:
        return "no code facts measured"
    above = [m for m in code if m.y.value >= bar]
    if above:
        m = max(above, key=lambda m: m.x.value)
        return f"{m.label} is the fastest keeping {bar} of native's ({m.y.value:.2f} at {m.x.value:.1f}x)"
    m = max(code, key=lambda m: m.y.value)
    return f"no setting measured keeps {bar} of native's (best: {m.label}, {m.y.value:.2f} at {m.x.value:.1f}x)"


def page(frontiers: dict[str, list[Placed]]) -> str:
    """The results page: a summary, per direction the two plots with their points' table, what is missing and how
    the points are read."""
    shows = {(d, m): shown(placed, m) for d, placed in frontiers.items() for m in MEASURES}
    left_off = {d: len(missing(placed, "recovered")) for d, placed in frontiers.items()}
    lines = ["# The frontier: speed against what the receiver keeps", "", "<!-- summary -->",
             f"- One point per adapter and recompute setting: the end-to-end speed-up over the receiver's own prefill at "
             f"{LENGTH} tokens against the context benefit kept (`recovered`) on `{DATA}`, and against facts kept; "
             "every coordinate is read from a committed results file."]
    for d in frontiers:
        lines.append(f"- {DIRECTIONS[d][0]}: {_ends(shows[d, 'recovered'])}; {len(shows[d, 'recovered'])} points "
                     f"plotted, {left_off[d]} left off for a missing coordinate.")
    lines.append("- Facts at 2048 tokens, code documents: " + "; ".join(
        f"{DIRECTIONS[d][0]}: {_facts_line(shows[d, 'kept'])}" for d in frontiers) + ".")
    lines += ["- Speed-ups come from several runs on shared CPU machines, which drift, and from more than one CPU model "
              "(each table's *timed on*; the frontier line is drawn across them): each row gives its run's own pure "
              "transfer. [Missing coordinates](#missing-coordinates) says what would measure each point left off.",
              "<!-- /summary -->", "",
              f"Each marker is one adapter (colour) with one recompute setting, at {LENGTH} receiver tokens. Across: the "
              "end-to-end speed-up over the receiver's own prefill (log scale). Up: the context benefit kept "
              f"(`recovered`, on `{DATA}`), or on the second plot of each direction the share of native prefill's exact "
              "answers kept across a hand-off. Squares recompute part of the context; hollow markers run the map's "
              "products in bf16 (`map_dtype`). The dashed line joins the points no other point beats on both axes: the "
              "frontier. Old and new adapter versions share a plot; an old version is on it once its end-to-end time at "
              f"{LENGTH} tokens is committed. Generated by `benchmarks/frontier.py` from the files the tables name: "
              "`python -m benchmarks report` writes this page and its plots, `--check` holds them to the files.", ""]
    for d in frontiers:
        lines += [f"## {DIRECTIONS[d][0]}", ""]
        for m, heading in (("recovered", "Context benefit kept"), ("kept", "Facts kept")):
            lines += [f"### {heading}", "", f"![{plot_title(d, m).replace(chr(10), ': ')}]({plot_name(d, m)})", "",
                      table(shows[d, m], m) if shows[d, m] else "No point has both coordinates.", ""]
    lines += ["## Missing coordinates", "",
              "Points each plot leaves off, what they have, and what would measure what they lack (with the point's "
              "adapter; stages as in `benchmarks/experiments/`, e.g. `real-s2g-handoff-knee-bf16` for `handoff-speed`, "
              "`real-s2g-handoff-knee12-bf16-2048` for `handoff`, `real-g2s-rank64-bf16` for `bench`; the tail's "
              "fidelity as `handoff/fidelity-s2g-2048-tail10.json` was made). The facts plots list only the settings "
              "of the adapter each direction recommends: no hand-off retrieval run holds KV Ridge, Dense Latent, the "
              "low-rank packages or older versions.", ""]
    for d, placed in frontiers.items():
        for m, heading in (("recovered", "context benefit kept"), ("kept", "facts kept")):
            lines += [f"### {DIRECTIONS[d][0]}, {heading}", "", missing_table(placed, m), ""]
    recovered = [q.recovered for placed in frontiers.values() for q in placed if q.recovered]
    named = len({f.src.file for f in recovered if f.data == DATA})
    lines += ["## How the points are read", "",
              f"- **recovered**: `hf-fold eval` on {LENGTH}-token windows. Every figure of a direction is on the same "
              "windows (checked: each file's benefit of the context, native against no context, is equal to float "
              f"rounding); {named} of the {len({f.src.file for f in recovered})} files name `{DATA}` (themselves, or "
              "their experiment's config), the others, history runs, share their windows.",
              "- **Recompute on fidelity windows**: they hold no question, so `statement-tail@F` recomputes the last "
              "F of the context there and is scored as `tail@F`; `statement@0.05` recomputes nothing and has no "
              "fidelity figure of its own ([Facts and fidelity together](knee.md)). Each is timed with its question.",
              "- **speed-up**: the receiver's own prefill of the same text over the hand-off, batch 1, on CPU. "
              "A `handoff-speed` stage times the user's call (plan + map + selection + recompute) on a hand-off "
              f"document of about {LENGTH} tokens (the document may land a token short); a `bench` stage times the plan "
              "(warm) and the map. *That run's pure transfer* is the full map with nothing recomputed in the same run "
              "(the registered float32 adapter); a row compares with another through it. *Timed on*: the CPU model "
              "its run recorded (runs made before provenance recorded the CPU say *not recorded*). `bench` fits its "
              "own KV Ridge and Dense Latent to time them.",
              "- **facts kept**: exact answers as a share of native prefill's on the same hand-off documents, code "
              "facts at the document's head and prose facts anywhere in it; above 1 the hand-off answered more than "
              "native did. The dotted line is 0.9 of native.", ""]
    return "\n".join(lines)


def write(root: Path = ROOT, reader: Reader | None = None, points: dict[str, list[Point]] = POINTS) -> list[Path]:
    """Write the page and its plots under ``root``; the paths written."""
    from benchmarks.frontier_plot import draw
    frontiers = build(reader, points)
    path = root / PAGE
    path.parent.mkdir(parents=True, exist_ok=True)
    written = [path]
    for d, placed in frontiers.items():
        for m in MEASURES:
            markers = shown(placed, m)
            if markers:
                draw(markers, m, plot_title(d, m), path.parent / plot_name(d, m))
                written.append(path.parent / plot_name(d, m))
    path.write_text(page(frontiers))
    return written


def check(root: Path = ROOT, reader: Reader | None = None, points: dict[str, list[Point]] = POINTS) -> list[str]:
    """Where the page or its plots under ``root`` differ from what the results files give (empty: current)."""
    from benchmarks.frontier_plot import digest, png_text
    frontiers = build(reader, points)
    path, out = root / PAGE, []
    if not path.is_file():
        return [f"{PAGE} is missing: python -m benchmarks report writes it"]
    shown_lines, expected = path.read_text().splitlines(), page(frontiers).splitlines()
    out += [f"{PAGE}, line {i + 1}: shows {a!r}, its files give {b!r}"
            for i, (a, b) in enumerate(zip(shown_lines, expected)) if a != b]
    if len(shown_lines) != len(expected):
        out.append(f"{PAGE}: {len(shown_lines)} lines shown, its files give {len(expected)}")
    for d, placed in frontiers.items():
        for m in MEASURES:
            markers, plot = shown(placed, m), path.parent / plot_name(d, m)
            if markers and not plot.is_file():
                out.append(f"{plot.relative_to(root)} is missing: python -m benchmarks report draws it")
            elif markers and png_text(plot).get("frontier-points") != digest(markers):
                out.append(f"{plot.relative_to(root)} was drawn from other figures: "
                           "python -m benchmarks report redraws it")
    return out

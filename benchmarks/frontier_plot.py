"""The frontier's plots (:mod:`benchmarks.frontier`): one marker per point, the frontier line, labels placed clear of
each other, and a digest of the points written into the PNG so ``--check`` can tell a plot drawn from other figures.
Imported only when drawing or checking, so reading the points never needs matplotlib."""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.frontier import DATA, LENGTH, MEASURES, on_frontier

if TYPE_CHECKING:
    from benchmarks.frontier import Shown

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
FORMAT_STYLE = {"code": ("#1f77b4", "o"), "prose": ("#ff7f0e", "^")}


def digest(markers: list[Shown]) -> str:
    """A short fingerprint of a plot's markers (label, format, x, y), stored in its PNG so that ``--check`` can tell
    a plot drawn from other figures."""
    rows = [[m.label, m.fmt, round(m.x.value, 6), round(m.y.value, 6)] for m in markers]
    return "sha256:" + hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def png_text(path: Path) -> dict[str, str]:
    """The text chunks (tEXt) of a PNG file: where :func:`draw` stores its digest."""
    data, pos, out = path.read_bytes(), 8, {}
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(value[1:]).decode("latin-1")
        pos += 12 + size
    return out


def draw(markers: list[Shown], measure: str, title: str, path: Path) -> None:
    """One plot: x the end-to-end speed-up (log), y ``measure``; each marker labelled; colour by adapter (``recovered``)
    or document format (``kept``); hollow for bf16 map products, squares for a recompute; the frontier dashed."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("drawing the frontier needs matplotlib: pip install 'heterofold-hub[plot]' "
                         "(--check does not)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    groups = list(dict.fromkeys(m.placed.point.group for m in markers))
    fig, ax = plt.subplots(figsize=(10, 6.2))
    for i, m in enumerate(markers):
        p = m.placed.point
        colour, shape = (COLOURS[groups.index(p.group) % len(COLOURS)], "o" if p.setting == "transfer" else "s") \
            if m.fmt is None else FORMAT_STYLE[m.fmt]
        ax.scatter(m.x.value, m.y.value, s=70, marker=shape, edgecolors=colour, linewidths=1.8, zorder=3,
                   facecolors="white" if p.map_dtype else colour)
    best = sorted((m for i, m in enumerate(markers) if i in on_frontier(markers)), key=lambda m: m.x.value)
    for fmt in dict.fromkeys(m.fmt for m in best):
        line = [m for m in best if m.fmt == fmt]
        ax.plot([m.x.value for m in line], [m.y.value for m in line], "--", zorder=1, linewidth=1,
                color="0.55" if fmt is None else FORMAT_STYLE[fmt][0])
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    xs, ys = [m.x.value for m in markers], [m.y.value for m in markers]
    ax.set_xlim(min(xs) / 1.35, max(xs) * 1.5)
    ax.set_ylim(min(0.0, min(ys)) - 0.08, max(1.0, max(ys)) + 0.08)
    for y, style in ((1.0, "-"), (0.0, "-")) if measure == "recovered" else ((1.0, "-"), (0.9, ":")):
        ax.axhline(y, color="0.75", linestyle=style, linewidth=1, zorder=0)
    ax.grid(alpha=0.25, which="major")
    ax.set_xlabel(f"end-to-end speed-up over the receiver's own prefill at {LENGTH} tokens (log scale)")
    ax.set_ylabel(MEASURES[measure] + (f", {DATA}" if measure == "recovered" else ", hand-off documents"))
    ax.set_title(title, fontsize=11)
    if measure == "recovered":
        handles = [Line2D([], [], marker="o", linestyle="", color=COLOURS[i % len(COLOURS)], label=g)
                   for i, g in enumerate(groups)]
        handles += [Line2D([], [], marker="s", linestyle="", color="0.3", label="with recompute")]
    else:
        handles = [Line2D([], [], marker=s, linestyle="", color=c, label=f"{fmt} facts")
                   for fmt, (c, s) in FORMAT_STYLE.items()]
        handles += [Line2D([], [], color="0.75", linestyle=":", label="0.9 of native")]
    handles += [Line2D([], [], marker="o", linestyle="", markerfacecolor="white", color="0.3",
                       label="bf16 map products"),
                Line2D([], [], linestyle="--", color="0.55", label="frontier")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()  # before the labels: they are placed where the markers end up
    _label(ax, markers)
    fig.savefig(path, dpi=100, metadata={"frontier-points": digest(markers)})
    plt.close(fig)


OFFSETS = [(round(r * math.cos(math.radians(a))), round(r * math.sin(math.radians(a))))
           for r in (9, 18, 30, 45, 62) for a in (30, -30, 150, -150, 90, -90, 0, 180, 60, -60, 120, -120)]


def _label(ax, markers: list[Shown]) -> None:
    """Each marker's label (one for a point's code and prose markers where they coincide) at the first of
    :data:`OFFSETS`, nearest first and on the side away from its nearest neighbour, where its text overlaps no marker
    and no label placed before it (markers taken left to right), with a leader line to its marker."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    labels: dict[tuple, list[str]] = {}  # (label, x, y) -> formats
    for m in markers:
        labels.setdefault((m.label, m.x.value, m.y.value), []).extend([m.fmt] if m.fmt else [])
    at = {key: ax.transData.transform(key[1:]) for key in labels}
    taken = [Bbox([xy - 6, xy + 6]) for xy in at.values()]
    for key in sorted(labels, key=lambda key: (key[1], -key[2])):
        (label, x, y), formats = key, labels[key]
        text = label + (f" ({', '.join(formats)})" if formats else "")
        others = [at[k] for k in labels if k != key and math.dist(at[k], at[key]) < 20]
        side = -1 if any(xy[1] > at[key][1] for xy in others) else 1
        candidates = sorted(OFFSETS, key=lambda o: (round(math.hypot(*o)), o[1] * side < 0))
        candidates.append(candidates[0])  # nowhere free: the first place, overlapping
        for i, (dx, dy) in enumerate(candidates):
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8,
                               ha="left" if dx > 2 else "right" if dx < -2 else "center",
                               va="bottom" if dy > 2 else "top" if dy < -2 else "center",
                               arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.6, "shrinkA": 1,
                                           "shrinkB": 4})
            note.update_positions(renderer)
            extent = Text.get_window_extent(note, renderer).expanded(1.04, 1.15)
            inside = box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0 and extent.y1 <= box.y1
            if i == len(candidates) - 1 or inside and not any(extent.overlaps(other) for other in taken):
                taken.append(extent)
                break
            note.remove()

"""What a hand-off does after mapping: one typed options object, validated when it is made.

    config = TransferConfig(recompute=0.05, select="statement")
    result = model.transfer(prefill, document, config=config, query=question)

The same type is what a registry version recommends (``registry.json``: ``evaluations[].recommended``), what the
commands build from their flags, and what a result records (``result.config``). It imports nothing heavy, so the
registry and the CLI's read-only commands validate settings without loading torch.

What the recommended setting fills in (:meth:`TransferConfig.resolve`): a ``config=`` is used as given. A call that
names ``recompute`` sets the share itself and starts from the defaults (``recompute=0`` is the pure transfer). A call
that names only other fields (``select``, ``repair_layers``, ``mapped_key_scale``) starts from the adapter version's
recommended setting and replaces those fields. A call that names nothing runs the recommended setting, or the pure
transfer when the version recommends none.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.transfer.selects import SELECT_READS, needs_query, select_name

FIELDS = ("recompute", "select", "repair_layers", "mapped_key_scale")


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_select(select) -> bool:
    if isinstance(select, str):
        return select in SELECT_READS
    return (select_name(select) in SELECT_READS and dataclasses.is_dataclass(select)
            and callable(getattr(select, "scores", None)))


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class TransferConfig:
    """What the receiver recomputes natively after the map. The defaults are the pure transfer.

    - ``recompute``: share of the context's mapped receiver positions recomputed at every layer, in [0, 1]
      (0: the pure transfer; 1: the receiver's own prefill). ``select="oracle"`` ignores it and takes its spans.
    - ``select``: the strategy choosing those positions: a name from :data:`SELECT_READS` (its default knobs), or
      a selector with its knobs set (``ChunkStart(chunk=32)``, see :mod:`~heterofold_hub.transfer.selection`);
      the ones that read the prompt wait for it when no ``query=`` is given (the recompute then runs in
      ``generate``).
    - ``repair_layers``: the receiver's first layers recomputed for every position (0: none).
    - ``mapped_key_scale``: a factor in (0, 4] on the keys of the rows left mapped (1: unchanged); below 1 they
      draw less of the receiver's attention away from its own rows.

    Numbers are stored as plain ``float`` / ``int`` (``recompute=1`` and ``1.0`` are one setting), and a selector
    with its default knobs as its name (``ChunkStart()`` and ``"chunk-start"`` are one setting)."""

    recompute: float = 0.0
    select: str | object = "content"  # a name, or a heterofold_hub.transfer.selection.Selector
    repair_layers: int = 0
    mapped_key_scale: float = 1.0

    def __post_init__(self):
        problems = []
        if not _real(self.recompute) or not 0 <= self.recompute <= 1:
            problems.append(f"recompute={self.recompute!r}: pass a share of the context in [0, 1] (0: pure "
                            "transfer, 1: native prefill), e.g. recompute=0.05")
        if not _is_select(self.select):
            problems.append(f"select={self.select!r}: choose one of {', '.join(SELECT_READS)}, or pass a selector "
                            "object with its knobs, e.g. ChunkStart(chunk=32)")
        if not _whole(self.repair_layers) or self.repair_layers < 0:
            problems.append(f"repair_layers={self.repair_layers!r}: pass a whole number of first layers (0: none)")
        if not _real(self.mapped_key_scale) or not 0 < self.mapped_key_scale <= 4:
            problems.append(f"mapped_key_scale={self.mapped_key_scale!r}: pass a factor in (0, 4] for the mapped "
                            "rows' keys (1: unchanged), e.g. mapped_key_scale=0.7")
        if problems:
            raise HeteroFoldError("; ".join(problems) + ".")
        for name, kind in (("recompute", float), ("repair_layers", int), ("mapped_key_scale", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))  # numpy scalars and ints alike: one key
        if not isinstance(self.select, str) and self.select == type(self.select)():
            object.__setattr__(self, "select", self.select_name)  # default knobs: the name says it all

    @property
    def select_name(self) -> str:
        return select_name(self.select)

    @property
    def active(self) -> bool:
        """Whether anything happens after the map (False: the pure transfer)."""
        return (self.recompute > 0 or self.repair_layers > 0 or self.select_name == "oracle"
                or self.mapped_key_scale != 1)

    @property
    def label(self) -> str:
        """A short name for tables and logs: ``transfer``, ``oracle`` or ``select@share``, then ``+L<repaired
        layers>`` and `` k<key scale>`` where they apply (``statement@0.05 k0.7``)."""
        base = "transfer" if self.recompute == 0 and self.select_name != "oracle" else (
            "oracle" if self.select_name == "oracle" else f"{self.select_name}@{self.recompute:g}")
        return (base + (f"+L{self.repair_layers}" if self.repair_layers else "")
                + (f" k{self.mapped_key_scale:g}" if self.mapped_key_scale != 1 else ""))

    @property
    def reads_prompt(self) -> bool:
        return self.active and needs_query(self.select)

    def replace(self, **fields) -> TransferConfig:
        return dataclasses.replace(self, **fields)

    def to_dict(self) -> dict:
        """The config as JSON fields (the registry's ``recommended`` block; the record in a result); a selector with
        knobs as ``{"name": ..., knob: value, ...}``."""
        fields = {name: getattr(self, name) for name in FIELDS}
        if not isinstance(self.select, str):
            fields["select"] = {"name": self.select_name, **self.select.knobs()}
        return fields

    @classmethod
    def from_dict(cls, fields: dict, *, where: str = "", strict: bool = True) -> TransferConfig:
        """A config from JSON fields; ``strict`` refuses unknown ones (a record's others, such as a result's
        ``share``, are skipped otherwise); ``where`` names the source in errors (a registry entry). Records
        written before the options had one name call ``recompute`` ``fraction``."""
        fields = dict(fields)
        if "fraction" in fields and "recompute" not in fields:
            fields["recompute"] = fields.pop("fraction")
        if not strict:
            fields = {name: value for name, value in fields.items() if name in FIELDS}
        if isinstance(fields.get("select"), dict):
            from heterofold_hub.transfer.selection import selector_from_dict  # noqa: PLC0415 (torch: only for knobs)

            fields["select"] = selector_from_dict(fields["select"])
        unknown = sorted(set(fields) - set(FIELDS))
        source = f" in {where}" if where else ""
        if unknown:
            raise HeteroFoldError(f"Unknown transfer option(s) {', '.join(unknown)}{source}; the options are "
                                  f"{', '.join(FIELDS)}.")
        try:
            return cls(**fields)
        except HeteroFoldError as bad:
            raise HeteroFoldError(f"{bad}{source and ' (' + source.strip() + ')'}") from None

    @classmethod
    def resolve(cls, config: TransferConfig | None = None, *, recommended: TransferConfig | None = None,
                **given) -> TransferConfig:
        """The config a call runs: ``config`` when given (naming other fields beside it is refused); else the
        fields in ``given`` that are not None over a base: the defaults when they name ``recompute``, else
        ``recommended`` (or the defaults when there is none).

        A ``select`` given without a share, over a base that recomputes nothing, is refused: it would choose
        nothing."""
        named = {name: value for name, value in given.items() if value is not None}
        unknown = sorted(set(named) - set(FIELDS))
        if unknown:
            raise HeteroFoldError(f"Unknown transfer option(s) {', '.join(unknown)}; the options are "
                                  f"{', '.join(FIELDS)}.")
        if config is not None:
            if not isinstance(config, TransferConfig):
                raise HeteroFoldError(f"config={config!r}; pass a TransferConfig, e.g. "
                                      "TransferConfig(recompute=0.05, select='statement').")
            if named:
                raise HeteroFoldError(f"Pass config= or the fields {', '.join(named)}, not both: e.g. "
                                      f"config.replace({', '.join(f'{k}={v!r}' for k, v in named.items())}).")
            return config
        base = cls() if recommended is None or "recompute" in named else recommended
        out = base.replace(**named)
        if "select" in named and "recompute" not in named and not out.active:
            raise HeteroFoldError(
                f"select={named['select']!r} chooses positions to recompute, but no share was given and this adapter "
                "version recommends none, so it would recompute nothing: pass a share too, e.g. "
                f"recompute=0.05, select={named['select']!r}; or leave select out for the pure transfer.")
        return out

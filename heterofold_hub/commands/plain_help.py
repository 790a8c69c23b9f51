"""Plain labels in ``--help``: typer shows an option's Python type (``<str>``, ``<bool>``) and a required argument as
``{sender}``; these classes give the classic labels instead (``TEXT``, ``INTEGER``, ``PATH``, nothing for a flag,
``SENDER``). Pass them as ``cls=`` to the app and its commands."""

from __future__ import annotations

from pathlib import Path

from typer.core import TyperArgument, TyperCommand, TyperGroup

LABELS = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH"}


def type_label(param) -> str:
    annotation = param.type_descriptor.annotation  # list[Path] for a repeatable option: its items' label
    return LABELS.get(annotation) or LABELS.get(next(iter(getattr(annotation, "__args__", ())), None), "VALUE")


def label_params(params: list) -> list:
    """Give each parameter without a metavar a plain one (once: later calls find it set)."""
    for param in params:
        if param.metavar is not None:
            continue
        if isinstance(param, TyperArgument):
            param.metavar = param.name.upper()
            # an argument's type column ignores its metavar: give it the plain label too
            param.display_type_rich = lambda ctx, label=type_label(param): label
        elif getattr(param, "is_flag", False):
            param.metavar = ""  # --resume/--no-resume says it all
        else:
            param.metavar = type_label(param)
    return params


class PlainHelpCommand(TyperCommand):
    def get_params(self, ctx):
        return label_params(super().get_params(ctx))

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument) and not param.hidden:
                pieces.append(param.metavar if param.required else f"[{param.metavar}]")
        return pieces


class PlainHelpGroup(TyperGroup):
    def get_params(self, ctx):
        return label_params(super().get_params(ctx))

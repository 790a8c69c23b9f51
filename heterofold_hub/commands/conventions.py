"""``hf-fold``'s conventions: data to stdout and messages to stderr (the consoles of ``heterofold_hub.output``), exit
codes, warnings and renamed flags. See docs/cli-conventions.md."""

from __future__ import annotations

import os
from pathlib import Path

from heterofold_hub.errors import UsageError
from heterofold_hub.output import data, messages  # noqa: F401  (the commands' consoles, re-exported for them)

EXIT_FAILURE = 1  # the command could not do its work (a missing adapter, a hub error, a corrupt file)
EXIT_USAGE = 2  # the command line itself is wrong (click's own usage errors exit 2 as well)


def warn(text: str) -> None:
    messages.print(f"[yellow]warning:[/] {text}", highlight=False)


def deprecated(old: str, new: str) -> None:
    """One line for a flag kept working under an old name."""
    warn(f"{old} is deprecated; use {new}")


def renamed(new: str, new_value, old: str, old_value):
    """The value of flag ``new``, or of its old name ``old`` (with a deprecation line); both given is a usage error."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise UsageError(f"give {new} only ({old} is its old name)")
    deprecated(old, new)
    return old_value


EXAMPLE_NAMES = {"--json": "results.json", "--plot": "plot.png"}  # a file name to suggest inside a folder given


def output_problem(flag: str, path, *, folder: bool = False, empty: bool = False) -> str | None:
    """Why ``path``, the value of ``flag``, cannot take a command's output, or None when it can: checked with the
    other arguments, before any work, so a long run never ends in a write that was bound to fail.

    A file (``--json``, ``--plot``) must not be an existing folder; a folder (``--out``: ``folder=True``) must not be
    an existing file, and with ``empty`` must be new or empty. Either way each existing parent must be a folder, and
    the nearest one writable (the missing ones are created)."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if folder and path.exists() and not path.is_dir():
        return f"{flag} {path}: is a file, not a folder; give a new or empty folder"
    if folder and empty and path.is_dir() and any(path.iterdir()):
        return f"{flag} {path}: is a folder that is not empty; give a new or empty folder"
    if not folder and path.is_dir():
        return f"{flag} {path}: is a folder; give a file path, e.g. {path / EXAMPLE_NAMES.get(flag, 'output')}"
    start = path if folder else path.parent
    nearest = next((p for p in (start, *start.parents) if os.path.lexists(p)), None)
    if nearest is not None and not nearest.is_dir():
        return (f"{flag} {path}: {nearest} is a file, so nothing can be written under it; give a path whose existing "
                "parents are folders")
    if nearest is not None and not os.access(nearest, os.W_OK | os.X_OK):
        return f"{flag} {path}: cannot write in {nearest}; give a path in a folder you can write to"
    return None


def check_outputs(*problems: str | None) -> None:
    """Raise one usage error (exit 2) for the output paths that cannot be written; see :func:`output_problem`."""
    found = [p for p in problems if p]
    if found:
        raise UsageError("Invalid arguments:\n  " + "\n  ".join(found))

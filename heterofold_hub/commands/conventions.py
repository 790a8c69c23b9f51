"""``hf-fold``'s conventions: data to stdout and messages to stderr (the consoles of ``heterofold_hub.output``), exit
codes, warnings and renamed flags. See docs/cli-conventions.md."""

from __future__ import annotations

from heterofold_hub.errors import UsageError
from heterofold_hub.io import output_problem  # noqa: F401  (re-exported for the commands)
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


def check_outputs(*problems: str | None) -> None:
    """Raise one usage error (exit 2) for the output paths that cannot be written; see :func:`output_problem`."""
    found = [p for p in problems if p]
    if found:
        raise UsageError("Invalid arguments:\n  " + "\n  ".join(found))

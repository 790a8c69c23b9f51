"""Atomic file writes (a reader sees the old file or the new one, never half of one), and the check that a path can
take an output before any work is spent on it."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


@contextmanager
def locked(path: str | os.PathLike):
    """Hold an exclusive lock on ``path + ".lock"`` (released by the kernel if this process dies), so a
    read-modify-write of ``path`` by two processes cannot lose one of the updates."""
    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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

"""Progress for long loops: a rich bar on a terminal; off one (a log file, a pipe, CI) plain lines such as
``fitting kv-ridge: 3/12`` at most every few seconds plus the final one, so a long run is never silent and its
log stays readable. Both go to stderr: stdout carries only a command's data."""

from __future__ import annotations

import contextlib
import time
from typing import TextIO

from rich.console import Console
from rich.progress import Progress

from heterofold_hub.output import messages

PLAIN_EVERY_S = 5.0  # a log gets a line this often, not one per step


class PlainLines:
    """Writes ``line()`` to ``stream`` when ``every_s`` have passed since the last one written (or ``final``)."""

    def __init__(self, stream: TextIO, every_s: float = PLAIN_EVERY_S, clock=time.monotonic):
        self.stream, self.every_s, self.clock = stream, every_s, clock
        self.last = clock()

    def offer(self, line: str, *, final: bool = False) -> bool:
        now = self.clock()
        if not final and now - self.last < self.every_s:
            return False
        self.stream.write(line + "\n")
        self.stream.flush()
        self.last = now
        return True


class PlainProgress:
    """The part of rich's :class:`Progress` our loops use (``add_task``, ``advance``), as plain lines
    ``description: done/total``; each task's final count is written once it is reached, or when the block ends."""

    def __init__(self, stream: TextIO, every_s: float = PLAIN_EVERY_S, clock=time.monotonic):
        self.lines = PlainLines(stream, every_s, clock)
        self.tasks: list[dict] = []

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:  # on an error the traceback or message says more than a count would
            for task in self.tasks:
                self._finish(task)

    def add_task(self, description: str, total: float | None = None) -> int:
        self.tasks.append({"description": description, "total": total, "done": 0, "finished": False})
        return len(self.tasks) - 1

    def advance(self, task_id: int, advance: float = 1) -> None:
        task = self.tasks[task_id]
        task["done"] += advance
        if task["total"] is not None and task["done"] >= task["total"]:
            self._finish(task)
        elif not task["finished"]:
            self.lines.offer(self._line(task))

    def _finish(self, task: dict) -> None:
        if not task["finished"]:
            task["finished"] = True
            self.lines.offer(self._line(task), final=True)

    @staticmethod
    def _line(task: dict) -> str:
        total = "" if task["total"] is None else f"/{task['total']:g}"
        return f"{task['description']}: {task['done']:g}{total}"


def stderr_console() -> Console:
    return messages


def progress_bar(enabled: bool = True, *, transient: bool = True, console: Console | None = None):
    """A context manager with ``add_task(description, total=)`` and ``advance(task, n)``: rich's bar on a terminal
    (or in a notebook), plain lines when ``console`` (default: stderr) is not one, nothing when not ``enabled``."""
    console = console or stderr_console()
    if not enabled:
        return Progress(disable=True)
    if console.is_terminal or console.is_jupyter:
        return Progress(console=console, transient=transient)
    return PlainProgress(console.file)


def status(text: str, console: Console | None = None):
    """A spinner with ``text`` on a terminal; off one, the text once as a line (``loading models``)."""
    console = console or stderr_console()
    if console.is_terminal:
        return console.status(text)
    console.print(text, highlight=False, markup=False)
    return contextlib.nullcontext()


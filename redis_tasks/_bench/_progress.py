"""A one-line progress bar on stderr, and the percentiles the reports use."""

from __future__ import annotations

import sys
import time
from typing import IO, Final

__all__ = ["Progress", "percentile"]

_WIDTH: Final = 28


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Progress:
    """Redraws ``label [####....] done/total`` in place on a terminal.

    Off a terminal (CI logs, pipes) it prints each finished step once instead of
    redrawing, and ``quiet`` turns it off.
    """

    def __init__(self, stream: IO[str] | None = None, *, quiet: bool = False) -> None:
        self._stream = stream or sys.stderr
        self._quiet = quiet
        self._live = self._stream.isatty()
        self._drawn = 0.0
        self._tag = ""

    def tagged(self, tag: str) -> Progress:
        """The same bar, every label prefixed with ``tag`` (a topology's name, say)."""
        view = Progress(self._stream, quiet=self._quiet)
        view._tag = f"{self._tag}{tag} "
        return view

    def update(self, label: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` for ``label``; a finished bar ends its line."""
        if self._quiet:
            return
        label = self._tag + label
        finished = done >= total
        if self._live:
            now = time.monotonic()
            if not finished and now - self._drawn < 0.1:
                return  # redraw at most ten times a second
            self._drawn = now
            filled = _WIDTH * min(done, total) // max(total, 1)
            bar = "#" * filled + "." * (_WIDTH - filled)
            self._stream.write(f"\r{label[:40]:40} [{bar}] {done}/{total}")
            if finished:
                self._stream.write("\n")
        elif finished:
            self._stream.write(f"{label[:40]:40} done ({total})\n")
        self._stream.flush()

    def end_line(self) -> None:
        """On a terminal, clear a bar left half drawn (a run stopped mid-step), so that
        what is printed next starts a line of its own."""
        if self._live and not self._quiet:
            self._stream.write("\r\033[K")
            self._stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (a finished measurement)."""
        if not self._quiet:
            self._stream.write(self._tag + text + "\n")
            self._stream.flush()

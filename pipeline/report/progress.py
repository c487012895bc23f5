"""Progress a person can watch: one line per phase (files listed, headers read, items parsed, tasks),
with counts, rate, MB/s and ETA.

The callback interface is :class:`Progress`'s four methods; whatever produces work calls them, so a new
source or executor plugs in without knowing how progress is shown:

* ``phase(name, total=None, unit=...)``: a new phase begins (the previous one's line is finished);
* ``add(n=1, nbytes=0)``: ``n`` more items done (``nbytes`` of data moved), from any thread;
* ``task_done(record)``: one task's record arrived (an executor calls it as results come back);
* ``note(text)``: a line of its own (the dashboard's link), then the phase's line again.

On a terminal the line is rewritten in place a few times a second; anywhere else (a log file, a pipe)
a line is written every ``every_s`` seconds while a phase runs, and once when it ends, so that a log
shows the run's pace without a line per item. :class:`NoProgress` (``-q``) shows nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

EVERY_S = 10.0
"""Seconds between progress lines where the stream is not a terminal (a log file)."""

TTY_EVERY_S = 0.2
"""Seconds between redraws of the line on a terminal."""


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class NoProgress:
    """The interface, showing nothing (``-q``, or a caller who asked for no progress)."""

    def phase(self, name: str, total: int | None = None, unit: str = "") -> None:
        """A new phase begins."""

    def add(self, n: int = 1, nbytes: int = 0) -> None:
        """``n`` more items of the phase done, ``nbytes`` bytes moved."""

    def task_done(self, record: Mapping[str, Any]) -> None:
        """One task finished: its record (``bytes_read``, ``bytes_written``)."""
        self.add(1, int(record.get("bytes_read", 0)) + int(record.get("bytes_written", 0)))

    def note(self, text: str) -> None:
        """A line of its own."""

    def close(self) -> None:
        """The last phase is over."""


class Progress(NoProgress):
    """Progress written to ``stream`` (stderr by default): in place on a terminal, a line every
    ``every_s`` seconds elsewhere. ``tty`` overrides the terminal check."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None, every_s: float = EVERY_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = TTY_EVERY_S if self.tty else every_s
        self._lock = threading.Lock()
        self._name: str | None = None
        self._total: int | None = None
        self._unit = ""
        self._done = 0
        self._bytes = 0
        self._t0 = self._shown = 0.0
        self._drawn = False
        self._wake = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- the interface ------------------------------------------------------------------------

    def phase(self, name: str, total: int | None = None, unit: str = "") -> None:
        with self._lock:
            self._finish()
            self._name, self._total, self._unit = name, total, unit
            self._done = self._bytes = 0
            self._t0 = self._shown = time.monotonic()
        if not self.tty and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="pipeline-progress", daemon=True)
            self._ticker.start()

    def add(self, n: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self._done += n
            self._bytes += nbytes
            if time.monotonic() - self._shown >= self.every_s:
                self._draw()

    def note(self, text: str) -> None:
        with self._lock:
            if self._drawn and self.tty:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        with self._lock:
            self._finish()
            self._name = None
        self._wake.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1.0)
            self._ticker = None
        self._wake.clear()

    # -- drawing ------------------------------------------------------------------------------

    def line(self, final: bool = False) -> str:
        """The current phase's line: done[/total (share)], rate, MB/s where bytes move, ETA where a total is known."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = self._done / elapsed
        unit = f" {self._unit}" if self._unit else ""
        parts = [f"{self._name}: {self._done:,}" + (f"/{self._total:,}" if self._total is not None else "") + unit]
        if self._total:
            parts[0] += f" ({self._done / self._total:.0%})"
        parts.append(f"{rate:,.1f}/s")
        if self._bytes:
            parts.append(f"{self._bytes / 1e6 / elapsed:,.1f} MB/s")
        if self._total is not None:
            left = self._total - self._done
            if left <= 0 or final:
                parts.append(f"in {_clock(elapsed)}")
            else:
                parts.append(f"ETA {_clock(left / rate)}" if rate > 0 else "ETA unknown")
        else:
            parts.append(f"in {_clock(elapsed)}" if final else f"{_clock(elapsed)} so far")
        return "  ".join(parts)

    def _draw(self, final: bool = False) -> None:
        """Write the line (the lock held)."""
        if self._name is None:
            return
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line(final))
        else:
            self.stream.write(self.line(final) + "\n")
        self.stream.flush()
        self._shown = time.monotonic()
        self._drawn = True

    def _finish(self) -> None:
        """End the current phase's line with its final figures (the lock held)."""
        if self._name is None:
            return
        if self._done or self._total:
            if self._total is not None:
                self._total = max(self._total, self._done)
            self._draw(final=True)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()
        self._drawn = False

    def _tick(self) -> None:
        """A line every ``every_s`` seconds while a phase runs, even when no item finishes (log files)."""
        while not self._wake.wait(self.every_s / 2):
            with self._lock:
                if self._name is not None and time.monotonic() - self._shown >= self.every_s:
                    self._draw()


def progress_for(shown: Any) -> NoProgress:
    """``True``: progress on stderr; ``False``/None: none; an object with the interface: itself."""
    if shown is True:
        return Progress()
    if not shown:
        return NoProgress()
    return shown  # type: ignore[no-any-return]

"""Imported by the local workers' fork server only (``WORKER_PRELOAD`` in :mod:`pipeline.execute.workers`):
Ctrl-C in a terminal reaches every process of its group, the workers included; they leave it to the
driver, which stops the run and closes them (``multiprocessing``'s fork server hands its children the
signal handlers it had before it started serving, so SIGINT set to ignored here is theirs from birth).
Elsewhere importing it does nothing."""

from __future__ import annotations

import signal
import sys
import threading


def _in_fork_server() -> bool:
    """Whether this process is multiprocessing's fork server, importing its preload modules."""
    return (
        "multiprocessing.forkserver" in sys.modules
        and sys.argv[:1] == ["-c"]
        and threading.current_thread() is threading.main_thread()
    )


if _in_fork_server():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

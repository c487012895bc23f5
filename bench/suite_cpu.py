"""A pytest plugin that records each test's wall and CPU seconds, to see where the suite's time goes:
one JSON line per test (its id, start, wall, this worker's CPU seconds and those of the child processes
it waited for, the xdist worker) appended to ``$SUITE_CPU_OUT`` (default ``suite_cpu.jsonl``).

``PYTHONPATH=bench .venv/bin/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder -p suite_cpu``

A server a worker keeps for its whole session (moto) is counted when it is waited for, at the session's
end, in that worker's last test.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    t0, (a0, b0) = time.time(), _cpu()
    yield
    a1, b1 = _cpu()
    row = {"id": item.nodeid, "t0": t0, "wall": time.time() - t0, "self": a1 - a0, "kids": b1 - b0}
    row["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")
    with open(os.environ.get("SUITE_CPU_OUT", "suite_cpu.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")

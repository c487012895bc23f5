"""How NumPy operations of a given size scale on 2 threads of one process against 2 processes.

A threads run (``execution.scheduler: threads``, what ``auto`` picks for small jobs) computes in one
interpreter. NumPy releases the GIL around each array operation and takes it back after; when another
thread holds it then, the operation's thread waits for a hand-over. The kernels are made of many
operations of 10-100 microseconds (a block of 65,536 pixels), so the hand-overs, not the arithmetic,
decide how far a second thread helps.

For each size: one float32 add in place, repeated, on one thread; the same count twice over on 2 threads
of this process; and on 2 processes started together (each its own interpreter and GIL). Speed-up =
2 x the one-thread time / the time for twice the work (2.0: perfect). Medians of ``BENCH_REPEATS``
(default 5) rounds. Writes ``bench/results/threads.json``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from save import save_json

SIZES = (4096, 16384, 65536, 262144, 1048576)
WORK = 5e8
"""Elements added per thread and round: the count of operations is this over the size."""
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))


def _adds(n: int, count: int) -> float:
    a, b = np.ones(n, dtype="f4"), np.ones(n, dtype="f4")
    t = time.perf_counter()
    for _ in range(count):
        np.add(a, b, out=a)
    return time.perf_counter() - t


def _two_processes(n: int, count: int) -> float:
    code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import threads; threads._adds({n}, {count})"
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t


def main() -> None:
    rows = {}
    print(f"{'elements':>10}{'op us':>8}{'2 threads':>11}{'2 processes':>13}")
    for n in SIZES:
        count = int(WORK // n)
        _adds(n, count // 10)  # warm-up
        one, threads, procs = [], [], []
        for _ in range(REPEATS):
            one.append(_adds(n, count))
            t = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(_adds, [n, n], [count, count]))
            threads.append(time.perf_counter() - t)
            start_up = _two_processes(1, 1)  # starting 2 interpreters that add nothing: taken off
            procs.append(max(_two_processes(n, count) - start_up, 1e-9))
        s, th, pr = statistics.median(one), statistics.median(threads), statistics.median(procs)
        rows[n] = {"op_us": s / count * 1e6, "threads_speedup": 2 * s / th, "processes_speedup": 2 * s / pr}
        print(f"{n:>10}{s / count * 1e6:8.1f}{2 * s / th:10.2f}x{2 * s / pr:12.2f}x")
    save_json("threads", {"repeats": REPEATS, "rows": rows})


if __name__ == "__main__":
    main()

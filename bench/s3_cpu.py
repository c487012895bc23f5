"""Where the cores go when the case study is read from the delayed store: each run's wall, the CPU
seconds of the pipeline's process tree (driver, fork server, workers; sampled every 50 ms, so each
process's last <50 ms is missed), of the moto server, and of this process (the latency proxy's threads).
On a 2-core machine the wall cannot go below their sum over 2: the bound the harness sets a run that
shares its cores.

``python bench/s3_cpu.py REPEATS NAME=TREE[,KEY=VALUE...] ...`` (trees: checkouts of the project, each with
its compiled kernels, e.g. ``base=/tmp/base now=.``; ``KEY=VALUE``: ``--set`` for that variant, e.g.
``io16=.,execution.io_concurrency=16``): a warm-up each, then ``REPEATS`` interleaved runs through a
proxy holding every request 25 ms; medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from save import run_args  # noqa: E402  (bench/ is on sys.path when a script runs)

from tests.latencyproxy import LatencyProxy  # noqa: E402
from tests.s3server import TEST_CREDENTIALS, start_moto, upload_tree  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
SETS = ("inputs.paths=[s3://bench/tiles/**/*.tif]", "inputs.index=null")


def run(tree: str, endpoint: str, out: str) -> tuple[float, float]:
    """One ``pipeline run`` from ``tree`` (``TREE[,KEY=VALUE...]``: with those ``--set``): (wall s, CPU s of
    its process tree)."""
    tree, *extra = tree.split(",")
    args = [sys.executable, "-W", "ignore", "-m", "pipeline"]
    args += run_args(CONFIG, out, out + ".report.json", sets=(*SETS, *extra, f"storage.endpoint_url={endpoint}"))
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu: dict[int, float] = {}
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            root = psutil.Process(proc.pid)
            for p in (root, *root.children(recursive=True)):
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(0.05)
    cpu[proc.pid] = usage.ru_utime + usage.ru_stime
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"pipeline failed: {proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
    return time.perf_counter() - start, sum(cpu.values())


def main() -> None:
    repeats = int(sys.argv[1])
    trees = dict(a.split("=", 1) for a in sys.argv[2:])
    os.environ.update(TEST_CREDENTIALS)
    out = os.path.join(ROOT, "out", "s3cpu")
    os.makedirs(out, exist_ok=True)
    rows: dict[str, list[tuple[float, ...]]] = {k: [] for k in trees}
    with start_moto(lean=False) as server:
        client = server.client()
        client.create_bucket(Bucket="bench")
        upload_tree(client, os.path.join(ROOT, "data_fixtures", "casestudy"), "bench", "tiles")
        moto, me = psutil.Process(server.process.pid), psutil.Process()
        with LatencyProxy(server.endpoint_url, 0.025) as proxy:
            for name, tree in trees.items():
                run(tree, proxy.url, f"{out}/{name}.zarr")
            for _ in range(repeats):
                for name, tree in trees.items():
                    m0, s0 = sum(moto.cpu_times()[:2]), sum(me.cpu_times()[:2])
                    proxy.clear()
                    wall, cpu = run(tree, proxy.url, f"{out}/{name}.zarr")
                    m1, s1 = sum(moto.cpu_times()[:2]), sum(me.cpu_times()[:2])
                    rows[name].append((wall, cpu, m1 - m0, s1 - s0, len(proxy.log)))
    for name, rs in rows.items():
        wall, cpu, moto_s, proxy_s, n = (statistics.median(r[i] for r in rs) for i in range(5))
        print(
            f"{name:8s} wall {wall:.2f} s ({' '.join(f'{r[0]:.2f}' for r in rs)})  pipeline CPU {cpu:.2f} s  "
            f"moto {moto_s:.2f} s ({1000 * moto_s / n:.1f} ms a request, {n:.0f})  proxy {proxy_s:.2f} s  "
            f"all over 2 cores {(cpu + moto_s + proxy_s) / 2:.2f} s"
        )


if __name__ == "__main__":
    main()

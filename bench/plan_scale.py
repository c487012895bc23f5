"""Plan time and peak memory against catalog size: 19,200 and 192,000 virtual tiles.

Each plan runs in a fresh process (`pipeline plan --json`), timed from outside, its peak
resident memory read from the kernel. Writes ``bench/results/plan_scale.json``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in (19_200, 192_000):
            out = os.path.join(tmp, str(count))
            t = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pipeline",
                    "fixtures",
                    out,
                    "--preset",
                    "casestudy",
                    "--count",
                    str(count),
                    "--index-only",
                ],
                check=True,
                capture_output=True,
            )
            make_s = time.perf_counter() - t
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            t = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-m", "pipeline", "plan", os.path.join(out, "config.yaml"), "--json"],
                check=True,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - t
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            plan = json.loads(r.stdout)
            rows.append(
                {
                    "tiles": count,
                    "index_s": make_s,
                    "plan_process_s": wall,
                    "plan_s": plan["driver_s"],
                    "peak_rss_mib": max(peak, before) / 1024,
                    "tasks": plan["tasks"],
                    "windows": plan["windows"],
                    "jobs": plan["jobs"],
                }
            )
    print(f"{'tiles':>8}{'make index s':>14}{'plan s':>8}{'process s':>11}{'peak MiB':>10}{'tasks':>8}{'windows':>10}")
    for r in rows:
        print(
            f"{r['tiles']:>8}{r['index_s']:14.1f}{r['plan_s']:8.2f}{r['plan_process_s']:11.2f}"
            f"{r['peak_rss_mib']:10.0f}{r['tasks']:8}{r['windows']:10}"
        )
    save_json("plan_scale", rows)


if __name__ == "__main__":
    main()

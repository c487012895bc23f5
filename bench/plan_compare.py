"""`pipeline plan` of two source trees side by side: the same plan, and how long each takes.

    git worktree add /tmp/planbase <commit>          # the code to compare against
    python bench/plan_compare.py /tmp/planbase CONFIG [CONFIG ...]

For each config, ``PLAN_RUNS`` (default 3) rounds, each running ``python -m pipeline plan CONFIG --json``
once per tree in turn (fresh processes, ``PYTHONPATH`` set to the tree; wall from outside, peak RSS from
GNU time), then medians. Before timing, each tree fingerprints its plan in a fresh process: a hash of
every column of the plan's tables (tiles, windows, jobs, partition offsets), of every partition's key,
of every ``PLAN_STEP``-th partition (default 7) built as objects (its ``SourceWindow`` s), of the
catalog's tile table and band attributes, and the ``--json`` output less its timings; the script fails
if the trees differ. Writes ``bench/results/plan_compare.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FINGERPRINT = """
import hashlib, json, sys
import numpy as np
import pipeline
from pipeline.execute.runner import plan_run
from pipeline.report.summary import StageClock

def digest(a):
    a = np.asarray(a)
    h = hashlib.sha256(f"{a.dtype}{a.shape}".encode())
    if a.dtype == object:
        h.update("\\0".join(map(repr, a.ravel().tolist())).encode())
    else:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]

cfg = pipeline.Config.from_yaml(sys.argv[1])
s = pipeline.plan(cfg)
p = s.plan
out = {f"tables.{k}": digest(getattr(p.tables, k)) for k in p.tables.__dataclass_fields__}
out["keys"] = hashlib.sha256("\\n".join(p.partitions.keys()).encode()).hexdigest()[:16]
h = hashlib.sha256()
for i in range(0, len(p.partitions), int(sys.argv[2])):
    h.update(repr(p.partitions[i]).encode())
out["partitions"] = h.hexdigest()[:16]
summary = dict(s.summary)
summary.pop("driver_s"); summary.pop("timings_s")
out["summary"] = summary
out["bands"] = repr(p.bands)
catalog, _ = plan_run(cfg, StageClock())
out.update({f"tiles.{c}": digest(catalog.tiles[c]) for c in catalog.tiles.columns})
out["band_attrs"] = repr(catalog.band_attrs)
print(json.dumps(out, sort_keys=True, default=str))
"""


def _env(tree: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": tree}


def _fingerprint(tree: str, config: str) -> dict:
    step = os.environ.get("PLAN_STEP", "7")
    r = subprocess.run(
        [sys.executable, "-c", FINGERPRINT, config, step], env=_env(tree), capture_output=True, text=True
    )
    if r.returncode:
        raise SystemExit(f"fingerprint failed in {tree}:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def _plan(tree: str, config: str) -> dict:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "pipeline", "plan", config, "--json"]
    r = subprocess.run(cmd, env=_env(tree), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"pipeline plan failed in {tree}:\n{r.stderr[-2000:]}")
    fields = dict(line.strip().split(": ", 1) for line in r.stderr.splitlines() if ": " in line)
    wall = fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    plan = json.loads(r.stdout)
    return {
        "wall_s": float(wall[-1]) + 60 * float(wall[-2]) + (3600 * float(wall[-3]) if len(wall) > 2 else 0),
        "cpu_s": float(fields["User time (seconds)"]) + float(fields["System time (seconds)"]),
        "peak_mib": int(fields["Maximum resident set size (kbytes)"]) / 1024,
        "timings_s": plan["timings_s"],
    }


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    base, configs = os.path.abspath(sys.argv[1]), [os.path.abspath(c) for c in sys.argv[2:]]
    runs = int(os.environ.get("PLAN_RUNS", "3"))
    trees = {"base": base, "this": ROOT}
    rows = []
    for config in configs:
        prints = {name: _fingerprint(tree, config) for name, tree in trees.items()}
        differ = sorted(k for k in prints["this"] if prints["this"][k] != prints["base"].get(k))
        if differ:
            raise SystemExit(f"{config}: the plans differ in {differ}")
        samples: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(runs):
            for name, tree in trees.items():
                samples[name].append(_plan(tree, config))
        row = {"config": config, "files": prints["this"]["summary"]["inputs"]["files"], "identical": True}
        for name, got in samples.items():
            row[name] = {
                "runs": got,
                **{f"median_{k}": statistics.median(g[k] for g in got) for k in ("wall_s", "cpu_s", "peak_mib")},
                **{f"median_{k}_s": statistics.median(g["timings_s"][k] for g in got) for k in got[0]["timings_s"]},
            }
        rows.append(row)
        b, t = row["base"], row["this"]
        print(f"{config}: {row['files']} inputs, plans identical (tables, keys, windows, --json)")
        for name, m in (("base", b), ("this", t)):
            print(
                f"  {name}: wall {m['median_wall_s']:6.2f} s  cpu {m['median_cpu_s']:6.2f} s  peak "
                f"{m['median_peak_mib']:6.0f} MiB  (catalog {m['median_index_s']:.2f} s, plan "
                f"{m['median_plan_s']:.2f} s)"
            )
        print(f"  this/base wall: {t['median_wall_s'] / b['median_wall_s']:.2f}x")
    save_json("plan_compare", {"base": base, "runs": runs, "rows": rows})


if __name__ == "__main__":
    main()

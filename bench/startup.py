"""A run's fixed costs, this tree against another checkout of the project, side by side.

``python bench/startup.py OTHER_TREE [CONFIG] [ROUNDS]`` runs ``pipeline run CONFIG -q --overwrite
--workers 2`` as whole processes, alternating this tree and OTHER_TREE (same interpreter, so the same
installed packages; each tree's own ``pipeline`` package, from its folder), a warm-up round first, and
prints the medians of:

* process: spawn to exit, as the caller waits for it;
* startup: spawn to the start of the first task (interpreter, imports, config, index, plan, store
  template, warm-up);
* teardown: end of the last task to exit (finalize, report, exit);
* tasks: the rest, from the first task's start to the last one's end;
* read, resample, write: the report's task-seconds of each stage (``stage_task_s``).

CONFIG defaults to ``configs/casestudy.yaml`` (relative to each tree); ROUNDS to 5. Needs the config's
fixtures in both trees.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from save import run_args  # (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ("process", "startup", "teardown", "tasks", "read", "resample", "write")


def run_once(tree: str, config: str, out: str) -> tuple[float, ...]:
    report = os.path.join(out, "report.json")
    t_epoch, t0 = time.time(), time.perf_counter()
    cmd = [sys.executable, "-m", "pipeline", *run_args(config, f"{out}/cube.zarr", report)]
    subprocess.run(cmd, check=True, cwd=tree)
    process = time.perf_counter() - t0
    exited = t_epoch + process
    with open(report) as f:
        doc = json.load(f)
    tasks, stages = doc["tasks"], doc["stage_task_s"]
    startup = min(t["start"] for t in tasks) - t_epoch
    teardown = exited - max(t["end"] for t in tasks)
    return (process, startup, teardown, process - startup - teardown, *(stages[k] for k in COLUMNS[4:]))


def main() -> None:
    other = os.path.abspath(sys.argv[1])
    config = sys.argv[2] if len(sys.argv) > 2 else "configs/casestudy.yaml"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    trees = {"this": ROOT, "other": other}
    for tree in trees.values():  # bytecode for both (where PYTHONDONTWRITEBYTECODE is set, a tree without it
        # compiles every module afresh each run: ~0.1 s of its start)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "pipeline")], check=True)
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds + 1):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                out = os.path.join(tmp, name)
                os.makedirs(out, exist_ok=True)
                row = run_once(trees[name], config, out)
                if r:  # round 0 warms the caches
                    rows[name].append(row)
    medians = {name: [statistics.median(col) for col in zip(*rs, strict=True)] for name, rs in rows.items()}
    print(f"{config}, {rounds} interleaved rounds, medians (s); this: {ROOT}, other: {other}")
    print(f"{'':8}" + "".join(f"{c:>10}" for c in COLUMNS))
    for name in trees:
        print(f"{name:8}" + "".join(f"{v:10.3f}" for v in medians[name]))
    ratio = [t / o for t, o in zip(medians["this"], medians["other"], strict=True)]
    print(f"{'ratio':8}" + "".join(f"{v:10.3f}" for v in ratio))


if __name__ == "__main__":
    main()

"""The cloudy composite's pipeline run from several trees (checkouts of the project, each with its compiled
kernels; a tree per setting to compare) or environments: a warm-up each, one run each sampled every 50 ms
for the process tree's summed PSS (and each process's peak; ``MC_SAMPLED`` interleaved sampled runs, default
1: the median peak, each run's, and the largest run's processes), then ``REPEATS`` interleaved unsampled runs
(wall, CPU seconds of the tree); the report's maps made and kept, the files opened, the stages'
task-seconds; and whether each cube is bit-identical to the first tree's.

``python bench/memory_trees.py REPEATS NAME=TREE[:VAR=VALUE,VAR=VALUE] ...`` (``MC_CONFIG``: another config,
``MC_SETS``: ``--set`` arguments, ``MC_NOWARM=1``: no warm-up runs).
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import psutil

WT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
OUT = os.path.join(WT, "out", "memory_trees")
CONFIG = f"{WT}/configs/cloudy.yaml"
CONFIG = os.environ.get("MC_CONFIG", CONFIG)


def cmd(out):
    return [
        PY,
        "-W",
        "ignore",
        "-m",
        "pipeline",
        "run",
        CONFIG,
        "-q",
        "--overwrite",
        "--workers",
        "2",
        "--set",
        f"output.path={out}",
        "--report",
        out + ".report.json",
    ] + os.environ.get("MC_SETS", "").split()


CPU = {}


def run(tree, env, out, sample, tag=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = tree
    e.update(env)
    t = time.perf_counter()
    p = subprocess.Popen(cmd(out), cwd=tree, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    per = {}
    cpu = {}
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        try:
            ps = psutil.Process(p.pid)
            procs = [ps, *ps.children(recursive=True)]
            tot = 0
            for q in procs:
                try:
                    c = q.cpu_times()
                    cpu[q.pid] = c.user + c.system
                except psutil.Error:
                    pass
                if not sample:
                    continue
                m = q.memory_full_info().pss
                tot += m
                key = q.pid
                per[key] = max(per.get(key, 0), m)
            peak = max(peak, tot)
        except psutil.Error:
            pass
        time.sleep(0.05)
    cpu[p.pid] = ru.ru_utime + ru.ru_stime
    CPU.setdefault(tag, []).append(sum(cpu.values()))
    wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(st)
    if rc not in (0, 3):
        print(p.stderr.read().decode()[-3000:])
        sys.exit(rc)
    return wall, peak / 1e6, sorted((v / 1e6 for v in per.values()), reverse=True)


def load(out):
    import zarr

    g = zarr.open_group(out, mode="r")
    return {k: np.asarray(g[k][...]) for k in sorted(g.array_keys())}


os.makedirs(OUT, exist_ok=True)
reps = int(sys.argv[1])
variants = []
for a in sys.argv[2:]:
    name, rest = a.split("=", 1)
    tree, _, envs = rest.partition(":")
    env = dict(kv.split("=", 1) for kv in envs.split(",") if kv)
    variants.append((name, tree, env))
walls = {v[0]: [] for v in variants}
mem = {}
for name, tree, env in variants:  # noqa: B007 - warm-up, then sampled
    if os.environ.get("MC_NOWARM"):
        break
    run(tree, env, f"{OUT}/out-{name}.zarr", False)
peaks: dict[str, list[float]] = {v[0]: [] for v in variants}
for _ in range(int(os.environ.get("MC_SAMPLED", "1"))):
    for name, tree, env in variants:
        w, pk, per = run(tree, env, f"{OUT}/out-{name}.zarr", True)
        peaks[name].append(pk)
        if pk == max(peaks[name]):
            mem[name] = (pk, per[:4], w)
for _ in range(reps):
    for name, tree, env in variants:
        walls[name].append(run(tree, env, f"{OUT}/out-{name}.zarr", False, name)[0])
ref = load(f"{OUT}/out-{variants[0][0]}.zarr")
if reps == 0:
    walls = {k: [mem[k][2]] for k in walls}
b = statistics.median(walls[variants[0][0]])
for name, _tree, _env in variants:
    o = load(f"{OUT}/out-{name}.zarr")
    same = o.keys() == ref.keys() and all(np.array_equal(o[k], ref[k], equal_nan=True) for k in ref)
    with open(f"{OUT}/out-{name}.zarr.report.json") as f:
        rep = json.load(f)
    wp = [round(v) for v in rep.get("memory", {}).get("worker_peak_mb").values()]
    mp = rep["execution"].get("maps")
    opens = sum(t["files_opened"] for t in rep["tasks"])
    stages = {k: round(v, 2) for k, v in rep["stage_task_s"].items()}
    wp = f"{wp} maps made {mp['made']} kept {mp['kept_mb']:.0f} opens {opens} stage_s {stages}"
    m = statistics.median(walls[name])
    runs = " ".join(f"{x:.2f}" for x in walls[name])
    cpu = statistics.median(CPU.get(name, [0]))
    pss = " ".join(f"{x:.0f}" for x in peaks[name])
    print(
        f"{name:14s} wall {m:6.2f} ({runs}) x{m / b:.3f} cpu {cpu:.2f}  PSS {statistics.median(peaks[name]):6.0f} MB",
        end="",
    )
    print(
        f" ({pss}) per-proc {[round(x) for x in mem[name][1]]} (the largest run's) worker_peak {wp}  identical={same}"
    )

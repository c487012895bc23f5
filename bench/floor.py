"""The floor for the case study on this machine: decode every needed input byte, encode the output.

Decode: each (file, overview level) the plan reads, read whole once with rasterio (the union of a
tile's windows is about the whole tile at that level). Encode: every chunk of the pipeline's own
output cube (``out/peers/pipeline.zarr`` from ``bench/peers.py``, else a fresh run), compressed with
the store's codec (ZSTD 3; the faster of numcodecs' and python-zstandard's encoders). One process, one
core, each step timed; the floor on N cores is the sum divided by N. Prints it against the pipeline's
median wall time from ``bench/results/peers.json`` when that exists, and the task-seconds of that run's
report (``out/peers/pipeline.report.json``) against decode + encode on one core. Then the same work
split between N processes started together, as a run's N workers share the machine: the floor's
task-seconds under the run's own contention, which the pipeline's task-seconds are also measured under.
Writes ``bench/results/floor.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from save import save_json  # noqa: E402  (bench/ is on sys.path when a script runs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CONFIG = os.path.join(ROOT, "configs", "casestudy.yaml")
CUBE = os.path.join(ROOT, "out", "peers", "pipeline.zarr")


def planned_reads() -> list[tuple[str, int]]:
    """Each (file, overview level) the case study's plan reads, sorted."""
    from pipeline.config import load_config
    from pipeline.execute.runner import plan_run

    _, plan = plan_run(load_config(CONFIG))
    return sorted({(w.path, w.overview_level) for p in plan.partitions for j in p.jobs for w in j.sources})


def decode(reads: list[tuple[str, int]]) -> tuple[float, int]:
    """Seconds to read each (file, level) whole, and the bytes decoded."""
    import rasterio

    t = time.perf_counter()
    nbytes = 0
    for path, level in reads:
        with rasterio.open(path, **({} if level < 0 else {"overview_level": level})) as ds:
            nbytes += ds.read(1).nbytes
    return time.perf_counter() - t, nbytes


def decode_seconds() -> tuple[float, int, int]:
    reads = planned_reads()
    return (*decode(reads), len(reads))


def cube_chunks() -> list[np.ndarray]:
    """Every chunk of the pipeline's cube of the case study (made first where ``CUBE`` is missing)."""
    import xarray as xr

    if not os.path.isdir(CUBE):
        subprocess.run(
            [sys.executable, "-m", "pipeline", "run", CONFIG, "-q", "--overwrite", "--set", f"output.path={CUBE}"],
            check=True,
            cwd=ROOT,
        )
    ds = xr.open_zarr(CUBE, mask_and_scale=False)
    chunks = []
    for band in ds.data_vars:
        data = ds[band].values
        _, ch, cw = ds[band].encoding.get("chunks", (1, 512, 512))
        for t in range(data.shape[0]):
            for r in range(0, data.shape[1], ch):
                for c in range(0, data.shape[2], cw):
                    chunks.append(np.ascontiguousarray(data[t, r : r + ch, c : c + cw]))
    return chunks


def encode_seconds() -> tuple[float, int, int]:
    """Every chunk of the cube compressed at ZSTD 3 on one core: the faster of numcodecs' codec (zarr's own)
    and python-zstandard's (what the pipeline's workers use), timed in turns, best of 3 each."""
    import numcodecs

    from pipeline.store.write import zstd_encoder

    chunks = cube_chunks()
    encoders = {"numcodecs": numcodecs.Zstd(level=3).encode, "zstandard": zstd_encoder(3, False)}
    best: dict[str, tuple[float, int]] = {}
    for _ in range(3):
        for name, encode in encoders.items():
            t0 = time.perf_counter()
            stored = sum(len(encode(a)) for a in chunks)
            s = time.perf_counter() - t0
            if name not in best or s < best[name][0]:
                best[name] = (s, stored)
    print("encode, best of 3: " + ", ".join(f"{k} {v[0]:.2f} s" for k, v in best.items()))
    s, stored = min(best.values())
    return s, sum(a.nbytes for a in chunks), stored


def share(i: int, n: int) -> None:
    """One of ``n`` processes of :func:`concurrent_floor`: its i-th share of the reads and of the chunks
    made ready, "ready" printed, then, once a line comes on stdin, decoded and encoded (python-zstandard,
    best of 3) and the seconds printed as JSON."""
    from pipeline.store.write import zstd_encoder

    reads, chunks = planned_reads()[i::n], cube_chunks()[i::n]
    encode = zstd_encoder(3, False)
    print("ready", flush=True)
    sys.stdin.readline()
    dec_s, _ = decode(reads)
    enc_s = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for a in chunks:
            encode(a)
        enc_s = min(enc_s, time.perf_counter() - t0)
    print(json.dumps({"decode_s": dec_s, "encode_s": enc_s}), flush=True)


def concurrent_floor(n: int) -> tuple[float, float]:
    """Decode and encode seconds summed over ``n`` processes that each do a share at the same time (started
    together once all are ready), as a run's ``n`` workers share the machine: the floor's task-seconds
    under the run's own contention for the cores' caches and memory."""
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--share", str(i), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(n)
    ]
    for p in procs:
        if p.stdout is None or p.stdout.readline().strip() != "ready":
            sys.exit("a share of the concurrent floor failed to start")
    for p in procs:
        if p.stdin is not None:
            p.stdin.write("go\n")
            p.stdin.flush()
    seconds = [json.loads(p.communicate()[0]) for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("a share of the concurrent floor failed")
    return sum(x["decode_s"] for x in seconds), sum(x["encode_s"] for x in seconds)


def main() -> None:
    cores = int(os.environ.get("BENCH_CORES", "2"))
    dec_s, dec_bytes, n_reads = decode_seconds()
    enc_s, raw, stored = encode_seconds()
    floor = (dec_s + enc_s) / cores
    result = {
        "decode_s": dec_s,
        "decoded_mb": dec_bytes / 1e6,
        "reads": n_reads,
        "encode_s": enc_s,
        "output_raw_mb": raw / 1e6,
        "output_stored_mb": stored / 1e6,
        "cores": cores,
        "floor_s": floor,
    }
    print(f"decode {n_reads} (file, level) reads, {dec_bytes / 1e6:.1f} MB: {dec_s:.2f} s on one core")
    print(f"encode {raw / 1e6:.1f} MB of chunks to {stored / 1e6:.1f} MB (ZSTD 3): {enc_s:.2f} s on one core")
    print(f"floor on {cores} cores: {floor:.2f} s")
    con_dec, con_enc = concurrent_floor(cores)
    result.update({"concurrent_decode_s": con_dec, "concurrent_encode_s": con_enc})
    print(
        f"the same in {cores} processes at once: decode {con_dec:.2f} + encode {con_enc:.2f} = "
        f"{con_dec + con_enc:.2f} task-seconds ({(con_dec + con_enc) / (dec_s + enc_s):.2f}x one core alone)"
    )
    peers = os.path.join(ROOT, "bench", "results", "peers.json")
    if os.path.exists(peers):
        with open(peers) as f:
            med = json.load(f)["medians"]
        result["pipeline_s"] = med["pipeline"]
        print(
            f"pipeline median {med['pipeline']:.2f} s = {med['pipeline'] / floor:.1f}x the floor; "
            f"gdalwarp {med['gdalwarp']:.2f} s = {med['gdalwarp'] / floor:.1f}x"
        )
    report = os.path.join(ROOT, "out", "peers", "pipeline.report.json")
    if os.path.exists(report):  # the task-seconds of bench/peers.py's last pipeline run against the floor's
        with open(report) as f:
            st = json.load(f)["stage_task_s"]
        task_s = st["read"] + st["resample"] + st["write"]
        result["pipeline_task_s"] = task_s
        print(
            f"pipeline task-seconds {task_s:.2f} (read {st['read']:.2f}, resample {st['resample']:.2f}, write "
            f"{st['write']:.2f}) = {task_s / (dec_s + enc_s):.2f}x decode + encode on one core "
            f"({dec_s + enc_s:.2f} s; target <= 1.6x); {task_s / (con_dec + con_enc):.2f}x the floor's "
            f"task-seconds in {cores} processes at once"
        )
        result["pipeline_vs_concurrent_floor"] = task_s / (con_dec + con_enc)
    save_json("floor", result)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--share"]:
        share(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()

"""Which device resamples each task, and why: detection, a cost model, calibration.

* Detection (cached per process): CuPy importable and a CUDA device present.
* Cost model, per task: CPU time (resample pixels at the CPU's rate for the method) against GPU
  time (host->device bytes / bandwidth + pixels at the GPU's rate + device->host bytes / bandwidth
  + a fixed launch cost). Decoding and encoding stay on the CPU either way; when they dominate the
  task, the reason says so, since no device choice can speed them up.
* Calibration: the first time a worker uses its GPU it measures transfer bandwidth and kernel
  rates (a fraction of a second) and caches them on disk; ``execution.gpu_profile`` overrides.
* Only methods with an array kernel can run on the GPU; the others stay on the CPU, with that reason.
* A composite's reduction over dates is priced the same way: on the GPU each date's layer is warped
  and fused there and reduced at the device's measured rate (``reduce:<reducer>`` in the profile), only
  the composite coming back; on the CPU at its rate.
* Parity: ``device: auto`` sends work to a GPU only after the kernels ran on that device and agreed
  with NumPy (:func:`verify_gpu`, cached per device model, driver and library versions).
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.errors import DeviceError
from pipeline.resample.kernels import KERNEL_METHODS
from pipeline.resample.methods import METHODS

# CPU resample rates (Mpx/s of output per core) used when nothing better is known: each method's row of
# the table (the array kernels on one core, cross-CRS 1024^2, from bench/kernels.py).
CPU_MPX_S = {name: m.cpu_mpx_s for name, m in METHODS.items()}
# Temporal reductions on one core, Mpx/s of pixels x dates (`python bench/reduce.py`: 1024^2 uint16 stacks
# with 40% nodata on the 2-core AMD EPYC, shared; the median at 8 dates, the slowest depth measured;
# the profile's "reduce:<reducer>" entries override them).
CPU_REDUCE_MPX_S = {
    "median": 240.0,
    "mean": 800.0,
    "min": 1400.0,
    "max": 1400.0,
    "first": 1400.0,
    "last": 1100.0,
    "count": 2400.0,
}
# Decode and encode rates on one CPU core (MB/s), for the part of a task no device choice changes.
CPU_DECODE_MB_S = 110.0
CPU_ENCODE_MB_S = 40.0
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pipeline", "gpu_profile.json")
PARITY_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pipeline", "gpu_parity.json")


@dataclass(frozen=True)
class GpuInfo:
    """Whether this process can use a GPU, and why not or which one (:func:`detect_gpu`)."""

    available: bool
    reason: str
    """Why not, or the device's name."""
    name: str | None = None
    memory_bytes: int | None = None
    cupy_version: str | None = None
    cuda_version: str | None = None


@dataclass(frozen=True)
class DeviceProfile:
    """What one GPU (and its link) can do; measured by :func:`calibrate_gpu` or given in the config."""

    h2d_gb_s: float
    d2h_gb_s: float
    gpu_mpx_s: dict[str, float]
    """Kernel rate per method, Mpx/s of output."""
    launch_s: float = 0.002
    """Fixed cost per task on the GPU (allocation, launches, synchronisation)."""
    cpu_mpx_s: dict[str, float] = field(default_factory=lambda: dict(CPU_MPX_S))
    source: str = "default"


@functools.lru_cache(maxsize=1)
def _no_gpu(reason: str) -> str:
    """A decision's reason where no GPU is usable: :func:`detect_gpu`'s own words (``no GPU here (...)``)."""
    return reason if reason.startswith("no GPU") else f"no GPU: {reason}"


def detect_gpu() -> GpuInfo:
    """CuPy importable and at least one CUDA device present; cached for the process."""
    try:
        import cupy
    except ModuleNotFoundError:
        return GpuInfo(False, "no GPU here (CuPy not installed; the 'gpu' extra installs it)")
    except Exception as e:  # noqa: BLE001 - a broken CuPy or CUDA install
        return GpuInfo(False, f"no GPU here (CuPy is installed but does not import: {type(e).__name__}: {e})")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            return GpuInfo(False, "no GPU here (CuPy found no CUDA device)", cupy_version=cupy.__version__)
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return GpuInfo(
            True,
            name,
            name=name,
            memory_bytes=int(props["totalGlobalMem"]),
            cupy_version=cupy.__version__,
            cuda_version=str(cupy.cuda.runtime.runtimeGetVersion()),
        )
    except Exception as e:  # noqa: BLE001
        return GpuInfo(False, f"no GPU here (CUDA is not usable: {e})")


def probe_worker() -> dict[str, Any]:
    """Run on each worker: its GPU, as a plain dict."""
    return asdict(detect_gpu())


@dataclass(frozen=True)
class TaskWork:
    """What one task moves and computes, from its partition (no pixels needed)."""

    method: str
    src_bytes: int
    """Decoded bytes of every source window: host->device."""
    dst_pixels: int
    dst_bytes: int
    """Warped windows coming back: device->host."""
    io_s_estimate: float = 0.0
    """Decode + encode seconds on the CPU (the same on either device)."""
    reducer: str | None = None
    """A composite's reducer (``composite.reducer``); None: no reduction."""
    stack_px: int = 0
    """Pixels times dates reduced: each date's fused layer of each chunk."""
    stack_bytes: int = 0
    """Those layers' bytes (the memory a median holds)."""


def task_work(partition: Any, method: str, itemsize: dict[str, int], reducer: str | None = None) -> TaskWork:
    """What a partition moves and computes (every source window is warped onto its chunk; with a
    ``reducer``, each job's dates are fused into layers that are then reduced)."""
    src_bytes = dst_pixels = dst_bytes = out_bytes = stack_px = stack_bytes = 0
    for job in partition.jobs:
        size = itemsize[job.band]
        chunk_px = job.window[2] * job.window[3]
        for s in job.sources:
            src_bytes += s.window[2] * s.window[3] * size
            dst_pixels += chunk_px
            dst_bytes += chunk_px * size
        out_bytes += chunk_px * size
        if reducer is not None:
            layers = len({s.layer for s in job.sources})
            stack_px += layers * chunk_px
            stack_bytes += layers * chunk_px * size
    if reducer is not None:  # the layers stay on the device: only each chunk's composite comes back
        dst_bytes = out_bytes
    io_s = src_bytes / (CPU_DECODE_MB_S * 1e6) + out_bytes / (CPU_ENCODE_MB_S * 1e6)
    return TaskWork(
        method=method,
        src_bytes=src_bytes,
        dst_pixels=dst_pixels,
        dst_bytes=dst_bytes,
        io_s_estimate=io_s,
        reducer=reducer,
        stack_px=stack_px,
        stack_bytes=stack_bytes,
    )


def estimate_seconds(work: TaskWork, profile: DeviceProfile) -> tuple[float, float]:
    """(cpu_s, gpu_s) for the resample step of one task."""
    mpx = work.dst_pixels / 1e6
    cpu_s = mpx / profile.cpu_mpx_s.get(work.method, 5.0)
    if work.method not in profile.gpu_mpx_s:
        return cpu_s, float("inf")
    gpu_s = (
        work.src_bytes / (profile.h2d_gb_s * 1e9)
        + mpx / profile.gpu_mpx_s[work.method]
        + work.dst_bytes / (profile.d2h_gb_s * 1e9)
        + profile.launch_s
    )
    if work.reducer is not None and work.stack_px:
        # On the GPU each date's layer is warped and fused there and stays for the reduction: only the
        # composite comes back (task_work counts it as dst_bytes).
        key = f"reduce:{work.reducer}"
        stack_mpx = work.stack_px / 1e6
        cpu_s += stack_mpx / profile.cpu_mpx_s.get(key, CPU_REDUCE_MPX_S.get(work.reducer, 50.0))
        gpu_rate = profile.gpu_mpx_s.get(key)
        if gpu_rate is None:
            return cpu_s, float("inf")
        gpu_s += stack_mpx / gpu_rate
    return cpu_s, gpu_s


def _atomic_json(path: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a concurrent reader never sees half a file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def device_key(info: GpuInfo) -> str:
    """What a parity verdict holds for: device model, CUDA runtime, CuPy and this package's version."""
    from pipeline import __version__

    return f"{info.name}|cuda {info.cuda_version}|cupy {info.cupy_version}|pipeline {__version__}"


def verify_gpu(xp: Any = None, info: GpuInfo | None = None, cache: str | None = None) -> dict[str, Any]:
    """Run every kernel on the device and compare with NumPy (:mod:`pipeline.resample.parity`).

    Returns ``{ok, detail, key}``; the verdict is cached per :func:`device_key` in ``cache`` (written
    atomically), so a worker checks its device once. ``xp``/``info`` default to CuPy and this worker's
    :func:`detect_gpu`."""
    info = info or detect_gpu()
    if not info.available:
        return {"ok": False, "detail": _no_gpu(info.reason), "key": None}
    cache = cache or PARITY_CACHE
    key = device_key(info)
    try:
        with open(cache) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    if key in known:
        return {"ok": bool(known[key]["ok"]), "detail": str(known[key]["detail"]), "key": key}
    from pipeline.resample.parity import check_parity

    if xp is None:
        import cupy

        xp = cupy
    failures = check_parity(xp)
    ok = not failures
    detail = "kernels match NumPy on this device" if ok else f"{len(failures)} cases differ: " + "; ".join(failures[:5])
    known[key] = {"ok": ok, "detail": detail}
    _atomic_json(cache, known)
    return {"ok": ok, "detail": detail, "key": key}


def decide(
    requested: str,
    gpu_available: bool,
    gpu_reason: str,
    work: TaskWork,
    profile: DeviceProfile | None,
    parity: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """Device for one task and the reason, in words a user can check against the report.

    ``parity``: :func:`verify_gpu`'s verdict for the GPU; ``auto`` uses a GPU only when it passed."""
    if requested == "cpu":
        return "cpu", "device: cpu requested"
    if not gpu_available:
        return "cpu", _no_gpu(gpu_reason)
    if requested == "auto" and not (parity or {}).get("ok"):
        detail = (parity or {}).get("detail", "not run")
        return "cpu", f"GPU kernels not verified against NumPy on this device ({detail})"
    if work.method not in KERNEL_METHODS:
        return "cpu", f"no GPU kernel for {work.method!r} ({', '.join(KERNEL_METHODS)} have one)"
    if profile is None:
        return "cpu", "GPU not calibrated"
    if work.method not in profile.gpu_mpx_s:
        return "cpu", f"no GPU rate measured for {work.method!r} (calibrate, or set it in execution.gpu_profile)"
    if work.reducer is not None and f"reduce:{work.reducer}" not in profile.gpu_mpx_s:
        return "cpu", f"no GPU rate measured for the {work.reducer} reduction (calibrate, or set reduce:{work.reducer})"
    cpu_s, gpu_s = estimate_seconds(work, profile)
    io_note = ""
    if work.io_s_estimate > max(cpu_s, gpu_s):
        io_note = f"; decode+encode (~{work.io_s_estimate:.3f} s) dominate and stay on the CPU either way"
    if requested == "gpu":
        return "gpu", f"device: gpu requested (estimate cpu {cpu_s:.4f} s, gpu {gpu_s:.4f} s incl. transfers){io_note}"
    if gpu_s < cpu_s:
        return "gpu", f"GPU faster: {gpu_s:.4f} s incl. transfers vs CPU {cpu_s:.4f} s{io_note}"
    return "cpu", f"CPU faster: {cpu_s:.4f} s vs GPU {gpu_s:.4f} s incl. transfers (too small to ship){io_note}"


def submit_options(device: str, cluster_has_gpu_resources: bool) -> dict[str, Any]:
    """Dask ``submit`` options: GPU tasks ask for a GPU where workers advertise one; CPU tasks never do."""
    if device == "gpu" and cluster_has_gpu_resources:
        return {"resources": {"GPU": 1}}
    return {}


def load_profile(override: dict[str, Any] | None) -> DeviceProfile | None:
    """The config's ``execution.gpu_profile``, else this machine's cached calibration, else None."""
    data = override
    source = "config"
    if data is None:
        try:
            with open(CACHE) as f:
                cached = json.load(f)
            data, source = cached, f"calibrated ({CACHE})"
        except (OSError, ValueError):
            return None
    return DeviceProfile(
        h2d_gb_s=float(data["h2d_gb_s"]),
        d2h_gb_s=float(data["d2h_gb_s"]),
        gpu_mpx_s={k: float(v) for k, v in data["gpu_mpx_s"].items()},
        launch_s=float(data.get("launch_s", 0.002)),
        cpu_mpx_s={**CPU_MPX_S, **{k: float(v) for k, v in data.get("cpu_mpx_s", {}).items()}},
        source=data.get("source", source),
    )


def calibrate_gpu(size: int = 2048) -> dict[str, Any]:
    """Measure this worker's GPU once (bandwidth, kernel rates) and cache it; returns the profile dict."""
    cached = load_profile(None)
    if cached is not None and any(k.startswith("reduce:") for k in cached.gpu_mpx_s):  # else measured before
        return asdict(cached)  # the reductions had rates: measure again
    import cupy
    import numpy as np

    from pipeline.resample.kernels import CoordMap, resample

    host = cupy.cuda.alloc_pinned_memory(size * size * 2)
    a = np.frombuffer(host, dtype="u2", count=size * size).reshape(size, size)
    a[:] = 1000
    dev = cupy.asarray(a)
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(5):
        dev.set(a)
    cupy.cuda.Device().synchronize()
    h2d = 5 * a.nbytes / (time.perf_counter() - t) / 1e9
    t = time.perf_counter()
    for _ in range(5):
        dev.get(out=a)
    d2h = 5 * a.nbytes / (time.perf_counter() - t) / 1e9
    rates = {}
    half = size // 2
    cmap = CoordMap((half, half), xe=cupy.arange(half + 1) * 2.0 + 0.25, ye=cupy.arange(half + 1) * 2.0 + 0.25)
    for method in KERNEL_METHODS:
        resample(dev, 0.0, cmap, method)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        resample(dev, 0.0, cmap, method)
        cupy.cuda.Device().synchronize()
        rates[method] = half * half / 1e6 / (time.perf_counter() - t)
    from pipeline.resample.reduce import REDUCERS, Reduction

    layers = 16
    stack = cupy.where(cupy.arange(layers)[:, None, None] % 3 == 0, 0, dev[None, :half, :half]).astype("u2")
    for reducer in REDUCERS:
        for _ in range(2):  # the first run compiles; the second is timed
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            r = Reduction(reducer, (half, half), "uint16", 0.0, xp=cupy)
            for k in range(layers):
                r.add(stack[k])
            r.result()
            cupy.cuda.Device().synchronize()
        rates[f"reduce:{reducer}"] = layers * half * half / 1e6 / (time.perf_counter() - t)
    profile = {"h2d_gb_s": h2d, "d2h_gb_s": d2h, "gpu_mpx_s": rates, "source": f"calibrated on {detect_gpu().name}"}
    _atomic_json(CACHE, profile)
    return profile


def check_request(requested: str, gpus: dict[str, dict[str, Any]]) -> None:
    """``--device gpu`` where no worker has a usable GPU is refused (never a silent CPU run)."""
    if requested == "gpu" and not any(g["available"] for g in gpus.values()):
        reasons = sorted({g["reason"] for g in gpus.values()}) or ["no workers"]
        raise DeviceError(f"--device gpu was requested but no worker has a usable GPU: {'; '.join(reasons)}")

"""Which device runs the resample step, and why.

GPU detection lives here, once, cached per process. The GPU kernels are not
wired in yet, so every task runs on the CPU; the decision and its reason are
still recorded so the report says what happened and why.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pipeline.errors import DeviceError


@dataclass(frozen=True)
class GpuInfo:
    available: bool
    reason: str
    """Why not, or the device's name."""
    name: str | None = None
    memory_bytes: int | None = None
    cupy_version: str | None = None
    cuda_version: str | None = None


@functools.lru_cache(maxsize=1)
def detect_gpu() -> GpuInfo:
    """CuPy importable and at least one CUDA device present; cached for the process."""
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - ImportError or a broken CUDA install
        return GpuInfo(False, f"CuPy is not importable ({type(e).__name__}: {e}); install the 'gpu' extra")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            return GpuInfo(False, "CuPy found no CUDA device", cupy_version=cupy.__version__)
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
        return GpuInfo(False, f"CUDA is not usable: {e}")


def choose_device(requested: str) -> tuple[str, str]:
    """Decide the run's device: (device, reason). ``gpu`` without one is refused."""
    gpu = detect_gpu()
    if requested == "cpu":
        return "cpu", "device: cpu requested"
    if requested == "gpu":
        if not gpu.available:
            raise DeviceError(f"--device gpu was requested but there is no usable GPU: {gpu.reason}")
        raise DeviceError(
            "--device gpu: the GPU resample kernels are not available in this version; use --device auto or cpu"
        )
    if not gpu.available:
        return "cpu", f"no GPU: {gpu.reason}"
    return "cpu", "GPU present but GPU kernels are not available in this version"

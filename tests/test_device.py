"""The device decision: cost model with injected profiles, refusals, scheduling options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.execute.device import (
    DeviceProfile,
    GpuInfo,
    TaskWork,
    decide,
    detect_gpu,
    estimate_seconds,
    submit_options,
    verify_gpu,
)
from tests.helpers import write_config

H200 = DeviceProfile(
    h2d_gb_s=50.0, d2h_gb_s=50.0, gpu_mpx_s={"nearest": 20000.0, "bilinear": 8000.0, "average": 6000.0}, launch_s=0.002
)
PASSED = {"ok": True, "detail": "kernels match NumPy on this device"}


def work(side: int, method: str = "bilinear") -> TaskWork:
    """A task resampling a side x side chunk from a 2x larger window of uint16."""
    return TaskWork(method=method, src_bytes=(2 * side) ** 2 * 2, dst_pixels=side * side, dst_bytes=side * side * 2)


def crossover(profile: DeviceProfile, method: str = "bilinear") -> int:
    """Smallest chunk side at which the model sends the task to the GPU."""
    for side in range(8, 20000, 8):
        if decide("auto", True, "", work(side, method), profile, PASSED)[0] == "gpu":
            return side
    return -1


def test_small_work_stays_on_the_cpu_large_goes_to_the_gpu() -> None:
    small, large = decide("auto", True, "", work(32), H200, PASSED), decide("auto", True, "", work(4096), H200, PASSED)
    assert small[0] == "cpu" and "too small" in small[1]
    assert large[0] == "gpu" and "incl. transfers" in large[1]


def test_crossover_moves_with_bandwidth() -> None:
    fast = crossover(H200)
    slow_link = crossover(DeviceProfile(h2d_gb_s=0.5, d2h_gb_s=0.5, gpu_mpx_s=H200.gpu_mpx_s, launch_s=0.002))
    assert 0 < fast < slow_link  # a slower link needs bigger work before shipping it pays
    never = DeviceProfile(h2d_gb_s=0.01, d2h_gb_s=0.01, gpu_mpx_s=H200.gpu_mpx_s)
    assert crossover(never) == -1 or crossover(never) > slow_link


def test_transfers_are_part_of_the_gpu_estimate() -> None:
    cpu_s, gpu_s = estimate_seconds(work(1024), H200)
    kernel_only = 1024 * 1024 / 1e6 / H200.gpu_mpx_s["bilinear"]
    assert gpu_s > kernel_only + (2048**2 * 2) / 50e9 and cpu_s > 0


@pytest.mark.parametrize(
    ("requested", "available", "method", "device", "says"),
    [
        ("cpu", True, "bilinear", "cpu", "cpu requested"),
        ("auto", False, "bilinear", "cpu", "no GPU: none here"),
        ("auto", True, "mode", "cpu", "no GPU rate measured for 'mode'"),
        ("gpu", True, "average", "gpu", "gpu requested"),
    ],
)
def test_decisions_and_their_reasons(requested: str, available: bool, method: str, device: str, says: str) -> None:
    d, reason = decide(requested, available, "none here", work(2048, method), H200, PASSED)
    assert d == device and says in reason


def test_io_dominated_work_says_so() -> None:
    w = TaskWork("nearest", src_bytes=10**8, dst_pixels=10**6, dst_bytes=2 * 10**6, io_s_estimate=5.0)
    assert "stay on the CPU either way" in decide("auto", True, "", w, H200, PASSED)[1]


def test_auto_uses_a_gpu_only_after_its_parity_check_passed() -> None:
    large = work(4096)
    assert decide("auto", True, "", large, H200, PASSED)[0] == "gpu"
    failed = {"ok": False, "detail": "2 cases differ: bilinear/same/uint16"}
    device, reason = decide("auto", True, "", large, H200, failed)
    assert device == "cpu" and "not verified" in reason and "bilinear/same/uint16" in reason
    assert decide("auto", True, "", large, H200, None)[0] == "cpu"


def test_parity_check_catches_a_kernel_that_disagrees(tmp_path: Path) -> None:
    """The check itself, run with NumPy standing in for the device: the real kernels pass, a kernel
    with one weight off fails and names its cases, and each verdict is cached per device key."""
    from pipeline.resample import parity
    from pipeline.resample.kernels import resample

    assert parity.check_parity(np, n=32) == []

    def off_by_a_weight(src, nodata, cmap, method):  # type: ignore[no-untyped-def]
        out = resample(src, nodata, cmap, method)
        if method == "bilinear":
            out = out.copy()
            out[5, 5] = out[5, 5] * 0.9 + 3
        return out

    failures = parity.check_parity(np, n=32, methods=["nearest", "bilinear"], device_resample=off_by_a_weight)
    assert failures and all(f.startswith("bilinear/") for f in failures)

    info = GpuInfo(True, "Test GPU", name="Test GPU", cuda_version="12080", cupy_version="13.6")
    cache = tmp_path / "parity.json"
    first = verify_gpu(np, info, str(cache))
    assert first["ok"] and "Test GPU" in first["key"]
    again = verify_gpu(object(), info, str(cache))  # from the cache: the bogus module is never used
    assert again == first
    other = GpuInfo(True, "Other GPU", name="Other GPU", cuda_version="12080", cupy_version="13.6")
    assert not verify_gpu(None, GpuInfo(False, "CuPy is not importable"), str(cache))["ok"]
    assert verify_gpu(np, other, str(cache))["key"] != first["key"]


@pytest.mark.gpu
def test_gpu_kernels_pass_parity_on_this_device(tmp_path: Path) -> None:
    if not detect_gpu().available:
        pytest.skip("no CUDA device / CuPy")
    import cupy

    verdict = verify_gpu(cupy, cache=str(tmp_path / "parity.json"))
    assert verdict["ok"], verdict["detail"]


def test_only_gpu_tasks_request_a_gpu() -> None:
    assert submit_options("gpu", True) == {"resources": {"GPU": 1}}
    assert submit_options("gpu", False) == {}
    assert submit_options("cpu", True) == {} and submit_options("cpu", False) == {}


def test_gpu_profile_override_is_validated(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "x/*.tif")
    ok = load_config(cfg, ["execution.gpu_profile={h2d_gb_s: 20, d2h_gb_s: 20, gpu_mpx_s: {nearest: 9000}}"])
    assert ok.execution.gpu_profile == {"h2d_gb_s": 20, "d2h_gb_s": 20, "gpu_mpx_s": {"nearest": 9000}}
    with pytest.raises(ConfigError, match="execution.gpu_profile"):
        load_config(cfg, ["execution.gpu_profile={h2d_gb_s: 20}"])
    with pytest.raises(ConfigError, match="execution.gpu_profile.gpu_mpx_s"):
        load_config(cfg, ["execution.gpu_profile={h2d_gb_s: 1, d2h_gb_s: 1, gpu_mpx_s: {lanczos: 1}}"])


@pytest.mark.skipif(detect_gpu().available, reason="this machine has a GPU")
def test_device_gpu_without_one_exits_2_and_writes_nothing(tmp_path: Path, small_dir: Path) -> None:
    cfg = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg), "--device", "gpu"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "no worker has a usable GPU" in r.stderr
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.gpu
def test_gpu_warp_equals_cpu_kernels(small_dir: Path) -> None:
    if not detect_gpu().available:
        pytest.skip("no CUDA device / CuPy")
    from pipeline.planning.jobs import SourceWindow
    from pipeline.resample.warp import warp_window

    rng = np.random.default_rng(0)
    src = rng.integers(1, 4000, (600, 600)).astype("u2")
    win = SourceWindow("mem", -1, (0, 0, 600, 600), (10.0, 0.0, 730000.0, 0.0, -10.0, 4990000.0), "EPSG:32631", 0.0)
    dst = (20.0, 0.0, 265000.0, 0.0, -20.0, 4985000.0)
    for method in ("nearest", "bilinear", "average"):
        cpu = warp_window(src, win, (256, 256), dst, "EPSG:32632", 0.0, method, engine="kernels")
        gpu = warp_window(src, win, (256, 256), dst, "EPSG:32632", 0.0, method, device="gpu")
        np.testing.assert_array_equal(cpu, gpu) if method == "nearest" else np.testing.assert_allclose(
            cpu, gpu, rtol=1e-3, atol=1
        )


def test_without_cupy_the_reason_says_no_gpu_here_plainly() -> None:
    import importlib.util

    from pipeline.execute.device import detect_gpu

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    reason = detect_gpu().reason
    assert reason == "no GPU here (CuPy not installed; the 'gpu' extra installs it)"
    assert decide("auto", False, reason, work(2048), H200, PASSED) == ("cpu", reason)  # said once, plainly


def composite_work(layers: int, side: int = 1024, reducer: str = "median") -> TaskWork:
    """A composite task: ``layers`` dates of one side x side uint16 chunk, each warped, then reduced; only
    the composite comes back."""
    base = work(side)
    return TaskWork(
        method=base.method,
        src_bytes=base.src_bytes * layers,
        dst_pixels=base.dst_pixels * layers,
        dst_bytes=base.dst_bytes,
        reducer=reducer,
        stack_px=side * side * layers,
        stack_bytes=side * side * 2 * layers,
    )


def test_a_composite_prices_its_reduction_on_either_device() -> None:
    from pipeline.execute.device import CPU_REDUCE_MPX_S

    profile = DeviceProfile(
        h2d_gb_s=50.0, d2h_gb_s=50.0, gpu_mpx_s={**H200.gpu_mpx_s, "reduce:median": 20000.0}, launch_s=0.002
    )
    plain_cpu, plain_gpu = estimate_seconds(work(1024), profile)
    cpu_s, gpu_s = estimate_seconds(composite_work(1), profile)
    assert cpu_s == pytest.approx(plain_cpu + 1024 * 1024 / 1e6 / CPU_REDUCE_MPX_S["median"])
    assert gpu_s == pytest.approx(plain_gpu + 1024 * 1024 / 1e6 / 20000.0)
    # A deep median goes to the GPU; without a measured reduction rate it stays on the CPU, saying why.
    device, reason = decide("auto", True, "", composite_work(32), profile, PASSED)
    assert device == "gpu" and "incl. transfers" in reason
    device, reason = decide("auto", True, "", composite_work(32), H200, PASSED)
    assert device == "cpu" and "no GPU rate measured for the median reduction" in reason
    # A link slow enough makes shipping the source windows lose.
    slow = DeviceProfile(h2d_gb_s=0.05, d2h_gb_s=0.05, gpu_mpx_s=profile.gpu_mpx_s)
    assert decide("auto", True, "", composite_work(32), slow, PASSED)[0] == "cpu"


def test_gpu_profile_takes_reduction_rates(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "x/*.tif")
    ok = load_config(cfg, ["execution.gpu_profile={h2d_gb_s: 20, d2h_gb_s: 20, gpu_mpx_s: {reduce:median: 900}}"])
    assert ok.execution.gpu_profile["gpu_mpx_s"] == {"reduce:median": 900}
    with pytest.raises(ConfigError, match="execution.gpu_profile.gpu_mpx_s"):
        load_config(cfg, ["execution.gpu_profile={h2d_gb_s: 1, d2h_gb_s: 1, gpu_mpx_s: {reduce:mode: 1}}"])

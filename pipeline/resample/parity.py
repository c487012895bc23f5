"""Kernel parity between array modules: the same inputs through NumPy and through a device module
(CuPy), compared. Pure: imports only NumPy and this package's kernels, so it runs on a bare GPU machine
(``bench/gpu_check.py``) and inside a worker (``pipeline.execute.device.verify_gpu``).

Three maps per method: ``same`` (one CRS, a 2x reduction with a quarter-pixel offset), ``reproj`` (a
rotated 2x reduction given as line maps, the shape of a cross-zone reprojection) and ``up3`` (aligned
3x upsampling reaching 8 pixels past the source's top-left corner). Value-picking methods must agree
exactly; the blending ones within 1e-3 relative (or 1 in integer units).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from pipeline.resample.coords import CoordMap, LineMap
from pipeline.resample.kernels import KERNEL_METHODS, resample
from pipeline.resample.methods import METHODS

EXACT = tuple(name for name, m in METHODS.items() if m.exact_on_gpu)
CASES = ("same", "reproj", "up3")
DTYPES = ("uint16", "float32")


def rotated_lines(
    n: int, offset: float, scale: float = 2.0, degrees: float = 1.5, origin: tuple[float, float] = (20.0, 20.0)
) -> LineMap:
    """One straight segment per row: a rotation by ``degrees`` (1.5), ``scale`` (2) source pixels per
    destination pixel, the first centre or corner at ``origin`` (x, y) in the source."""
    th = np.radians(degrees)
    r = np.arange(n) + offset
    c, s = scale * np.cos(th), scale * np.sin(th)
    return LineMap(
        shape=(n, n),
        row_ptr=np.arange(n + 1),
        col=np.zeros(n, "i8"),
        count=np.full(n, n, "i8"),
        t0=np.zeros(n),
        x0=origin[0] + c * offset - s * r,
        dx=np.full(n, c),
        y0=origin[1] + c * r + s * offset,
        dy=np.full(n, s),
    )


def build_map(case: str, n: int, xp: Any) -> CoordMap:
    """The destination map of ``case`` for an ``n`` x ``n`` output, on array module ``xp``."""
    if case == "same":
        edges = np.arange(n + 1, dtype="f8") * 2.0 + 0.25
        cmap = CoordMap((n, n), xe=edges, ye=edges, scale_xy=(0.5, 0.5))
    elif case == "up3":
        edges = (np.arange(n + 1, dtype="f8") - 8) / 3
        cmap = CoordMap((n, n), xe=edges, ye=edges, scale_xy=(3.0, 3.0))
    else:
        cmap = CoordMap((n, n), centres=rotated_lines(n, 0.5), corners=rotated_lines(n + 1, 0.0), scale_xy=(0.5, 0.5))
    return cmap.to(xp)


def build_source(method: str, n: int, dtype: str, seed: int = 0) -> np.ndarray:
    """A source for an ``n`` x ``n`` output: random values, a nodata (0) corner, few values for mode."""
    rng = np.random.default_rng(seed)
    src = (rng.random((2 * n + 48, 2 * n + 48)) * 4000 + 1).astype(dtype)
    if method == "mode":  # few distinct values, so the mode means something
        src = (src // 500 * 500 + 1).astype(dtype)
    src[: n // 4, : n // 4] = 0
    return src


def agree(method: str, reference: np.ndarray, other: np.ndarray) -> bool:
    """Whether ``other`` matches the NumPy ``reference`` as the method's parity rule asks."""
    if reference.shape != other.shape:
        return False
    if method in EXACT:
        return bool(np.array_equal(reference, other, equal_nan=reference.dtype.kind == "f"))
    return bool(np.allclose(reference.astype("f8"), other.astype("f8"), rtol=1e-3, atol=1, equal_nan=True))


def to_host(a: Any) -> np.ndarray:
    """A device array copied to the host as NumPy (NumPy arrays pass through)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def check_parity(
    xp: Any,
    n: int = 64,
    methods: Iterable[str] = KERNEL_METHODS,
    device_resample: Callable[[Any, float, CoordMap, str], Any] = resample,
) -> list[str]:
    """Every method x map x dtype through NumPy and through ``xp``; the cases that disagree (empty: parity).

    ``device_resample``: the kernel entry point run on ``xp`` (the same :func:`resample` as the reference
    unless a caller checks another implementation)."""
    failures = []
    for method in methods:
        for case in CASES:
            for dtype in DTYPES:
                src = build_source(method, n, dtype)
                reference = resample(src, 0.0, build_map(case, n, np), method)
                try:
                    other = to_host(device_resample(xp.asarray(src), 0.0, build_map(case, n, xp), method))
                except Exception as e:  # noqa: BLE001 - a device kernel that raises has failed the check
                    failures.append(f"{method}/{case}/{dtype}: raised {type(e).__name__}: {e}")
                    continue
                if not agree(method, reference, other):
                    failures.append(f"{method}/{case}/{dtype}: differs from NumPy")
    return failures

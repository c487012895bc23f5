"""Bench only (``bench/bounds.py``): with this folder on PYTHONPATH, every Python process of a run (the
driver, the fork server, the workers forked from it) gets a ``pipeline.resample.warp.warp_window`` that copies
the source window's pixels into the destination's shape instead of resampling them. The run reads,
plans, schedules and writes as usual, so its wall time is the pipeline's with resampling free: the
least any kernel work could bring it to. Its cube is not a resampled one; the bench writes it apart.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any


def _copy_window(src_array: Any, src: Any, dst_shape_yx: tuple[int, int], *args: Any, **kwargs: Any) -> Any:
    import numpy as np

    h, w = dst_shape_yx
    part = src_array[:h, :w]
    if part.shape != (h, w):  # a source smaller than the block: its edge pixels repeated
        part = np.pad(part, ((0, h - part.shape[0]), (0, w - part.shape[1])), mode="edge")
    return np.ascontiguousarray(part)


class _PatchWarp(importlib.abc.MetaPathFinder):
    """Replaces ``warp_window`` as ``pipeline.resample.warp`` finishes importing, before anything imports the name."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "pipeline.resample.warp":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            module.warp_window = _copy_window

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchWarp())

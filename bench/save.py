"""Where the benchmarks leave their figures: ``bench/results/NAME.json``."""

from __future__ import annotations

import json
import os
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def save_json(name: str, data: Any) -> str:
    """Write ``data`` to ``bench/results/NAME.json``; returns the path."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    return path


def run_args(config: str, out: str, report: str, workers: int = 2, sets: tuple[str, ...] = ()) -> list[str]:
    """``pipeline run`` arguments as every bench passes them: quiet, over the last run, ``workers``
    workers, the output at ``out`` and the report at ``report``, then each ``--set KEY=VALUE``."""
    args = ["run", config, "-q", "--overwrite", "--workers", str(workers), "--set", f"output.path={out}"]
    for item in sets:
        args += ["--set", item]
    return [*args, "--report", report]

"""Helpers the tests import (fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PATTERN = r"(?P<date>\d{4}-\d{2}-\d{2})/(?P<tile>[^/]+)_(?P<band>[^/_.]+)\.tif$"


def write_config(folder: Path, inputs_glob: str, **sections: Any) -> Path:
    """A config file in ``folder`` for the given input glob; sections override defaults."""
    raw: dict[str, Any] = {
        "inputs": {"paths": [inputs_glob], "pattern": PATTERN},
        "grid": {"crs": "EPSG:32632", "resolution": 20},
        "output": {"path": str(folder / "out.zarr"), "chunks": {"y": 128, "x": 128}},
        "execution": {"workers": 2, "partition_mb": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = raw[key] | value
        else:
            raw[key] = value
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path

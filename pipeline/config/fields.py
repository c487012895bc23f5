"""The config's field types and validators: each value type checks its input and says, in the project's
own words, what is allowed (:mod:`pipeline.config.model` turns a failure into a ConfigError naming
the dotted key). Paths resolve against the working directory unless absolute or a URL."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    PlainValidator,
    WithJsonSchema,
)

from pipeline.config import SCHEDULERS, is_url, validate_crs
from pipeline.errors import ConfigError
from pipeline.resample.methods import NAMES as METHOD_NAMES

if TYPE_CHECKING:
    Resampling = str
else:
    Resampling = Literal[METHOD_NAMES]
"""The resampling methods: the names of :mod:`pipeline.resample.methods`'s table (which imports nothing), so
that a method is added in ``resample/`` alone."""


Fuse = Literal["first", "last", "min", "max", "mean"]


Engine = Literal["auto", "kernels", "gdal"]


Codec = Literal["zstd", "blosc", "gzip", "none"]


ZarrFormat = Literal[2, 3]


Device = Literal["auto", "cpu", "gpu"]


OnError = Literal["skip", "fail"]


GroupBy = Literal["solar_day", "time", "none"]

Period = Literal["P16D", "P1M", "P3M", "P1Y", "all"]
"""``composite.period``: 16 days from each 1 January (MODIS's 16-day periods), a calendar month, a quarter, a
calendar year, or the whole time range in one step."""

Reducer = Literal["median", "mean", "min", "max", "first", "last", "count"]


STAC_PATTERN = r"(?P<band>.+)"
"""``inputs.pattern`` for STAC inputs, where the band is the asset's name."""


def _integer(minimum: int | None) -> Any:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            raise ValueError(f"must be an integer{'' if minimum is None else f' >= {minimum}'}, got {value!r}")
        return value

    return check


def _number(positive: bool) -> Any:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and not value > 0):
            raise ValueError(f"must be a {'positive ' if positive else ''}number, got {value!r}")
        return float(value)

    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


# Numbers and flags as YAML gives them: no true for 1, no "3" for 3.
PosInt = Annotated[
    int, PlainValidator(_integer(1), json_schema_input_type=int), WithJsonSchema({"type": "integer", "minimum": 1})
]


NonNegInt = Annotated[
    int, PlainValidator(_integer(0), json_schema_input_type=int), WithJsonSchema({"type": "integer", "minimum": 0})
]


Integer = Annotated[
    int, PlainValidator(_integer(None), json_schema_input_type=int), WithJsonSchema({"type": "integer"})
]


PosNumber = Annotated[
    float,
    PlainValidator(_number(True), json_schema_input_type=float),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0}),
]


Number = Annotated[
    float, PlainValidator(_number(False), json_schema_input_type=float), WithJsonSchema({"type": "number"})
]


Flag = Annotated[bool, PlainValidator(_flag, json_schema_input_type=bool), WithJsonSchema({"type": "boolean"})]


def _resolve(value: str) -> str:
    """A path against the working directory, unless absolute or a URL (``s3://``, ``https://``)."""
    if not value:
        raise ValueError("must not be empty")
    return value if os.path.isabs(value) or is_url(value) else os.path.normpath(os.path.join(os.getcwd(), value))


PathStr = Annotated[str, AfterValidator(_resolve)]
"""A local path (relative: against the working directory) or a URL."""


def as_paths(value: Any) -> tuple[str, ...]:
    """``inputs.paths``: one glob or a list of them, each resolved (a URL stays as it is)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p for p in value):
        raise ValueError(f"must be a non-empty list of glob patterns, got {value!r}")
    return tuple(_resolve(p) for p in value)


def as_bands(value: Any) -> tuple[str, ...] | None:
    """``inputs.bands``: null, or band names in the order wanted (numbers become names)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(b, (str, int)) and not isinstance(b, bool) for b in value)
    ):
        raise ValueError(f"must be null or a non-empty list of band names, got {value!r}")
    return tuple(str(b) for b in value)


def as_assets(value: Any) -> Any:
    """``inputs.assets``: null, {band: asset key}, or a list of asset keys named as themselves."""
    if value is None:
        return None
    if isinstance(value, list):
        value = {str(a): str(a) for a in value}
    if not isinstance(value, dict) or not value:
        raise ValueError(f"must be null or a mapping {{band name: asset key}}, got {value!r}")
    return {str(k): v for k, v in value.items()}


def as_resampling(value: Any) -> Any:
    """``resampling``: one method, or {band: method} with ``"*"`` for every other band (odc-stac's form)."""
    methods = get_args(Resampling)
    if isinstance(value, str) and value in methods:
        return value
    if isinstance(value, dict) and value and all(isinstance(k, (str, int)) for k in value):
        bad = {k: v for k, v in value.items() if v not in methods}
        if not bad:
            return {str(k): v for k, v in value.items()}
        raise ValueError(f"per-band methods must be one of {' | '.join(methods)}; got {bad}")
    raise ValueError(f'must be one of {" | ".join(methods)}, or per band {{"*": average, SCL: mode}}; got {value!r}')


def as_classes(value: Any) -> tuple[int | str, ...]:
    """``mask.exclude`` / ``mask.exclude_bits``: a list of integers (class values, bit positions) or names
    (STAC ``classification:classes`` / ``bitfields`` names, resolved against the mask band's items)."""
    if value is None:
        return ()
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v) for v in value
    ):
        raise ValueError(f"must be a list of integers or class names, got {value!r}")
    return tuple(value)


def as_bits(value: Any) -> tuple[int | str, ...]:
    """``mask.exclude_bits``: as :func:`as_classes`, integers being bit positions 0..63."""
    out = as_classes(value)
    bad = [v for v in out if isinstance(v, int) and not 0 <= v < 64]
    if bad:
        raise ValueError(f"bit positions must be 0..63, got {bad}")
    return out


def as_rate_key(value: str) -> str:
    """A key of ``execution.gpu_profile.gpu_mpx_s``: a resampling method, or ``reduce:<reducer>``."""
    allowed = [*get_args(Resampling), *(f"reduce:{r}" for r in get_args(Reducer))]
    if value not in allowed:
        raise ValueError(f"must be one of {' | '.join(allowed)}, got {value!r}")
    return value


def as_gdal_env(value: Any) -> Any:
    """``inputs.gdal_env``: GDAL options as strings (booleans as YES/NO); credentials are refused."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"must be a mapping of GDAL config options, e.g. {{GDAL_HTTP_MAX_RETRY: 5}}, got {value!r}")
    secret = [k for k in value if re.search(r"SECRET|PASSWORD|TOKEN|USERPWD|ACCESS_KEY|CONNECTION_STRING|HEADER", k)]
    if secret:  # it would travel in the task graph and the report's config; the value is never echoed
        raise ValueError(
            f"{secret[0]} holds a credential: give it through the AWS chain (environment, storage.profile, "
            "instance role), not the config"
        )
    return {k: ("YES" if v is True else "NO" if v is False else str(v)) for k, v in value.items()}


def as_crs(value: Any) -> str | None:
    """``grid.crs``: anything pyproj reads as a CRS, kept as given; null: the inputs'."""
    if value is None:
        return None
    try:
        return validate_crs(value, "grid.crs")
    except ConfigError as e:
        raise ValueError(e.problem) from None


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def as_resolution(value: Any) -> tuple[float, float] | None:
    """``grid.resolution``: one positive number, or [x, y]; null: the finest band's."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_positive(v) for v in value):
        return float(value[0]), float(value[1])
    if _positive(value):
        return float(value), float(value)
    raise ValueError(f"must be a positive number, or [x, y] of two, or null, got {value!r}")


def as_bounds(value: Any) -> tuple[float, float, float, float] | None:
    """``grid.bounds``: null, or [xmin, ymin, xmax, ymax] with min < max."""
    if value is None:
        return None
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 4
        or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in value)
    ):
        raise ValueError(f"must be null or [xmin, ymin, xmax, ymax], got {value!r}")
    if not (value[0] < value[2] and value[1] < value[3]):
        raise ValueError(f"needs xmin < xmax and ymin < ymax, got {list(value)}")
    return float(value[0]), float(value[1]), float(value[2]), float(value[3])


def auto_none(value: Any) -> Any:
    """``auto`` as None (the value then comes from the machine or the run)."""
    return None if value == "auto" else value


def as_scheduler(value: str) -> str:
    """``execution.scheduler``: one of the modes, or a scheduler's address."""
    if value not in SCHEDULERS and "://" not in value:
        raise ValueError(f"must be {' | '.join(SCHEDULERS)} or an address like tcp://host:8786, got {value!r}")
    return value


def as_endpoint(value: str | None) -> str | None:
    """``storage.endpoint_url``: null, or an http(s) URL."""
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
    return value

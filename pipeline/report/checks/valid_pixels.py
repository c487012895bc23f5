"""Checks of which pixels count as data: integer bands with no nodata value (``nodata``) and, for a
composite, periods whose pixels have few clear observations left after the mask (``clear_observations``)."""

from __future__ import annotations

from typing import Any

from pipeline.report.checks.entry import entry
from pipeline.report.summary import rules_text

FEW_CLEAR = {"median": 3, "mean": 3}
"""``clear_observations``: a pixel of a period with fewer clear observations than this is thinly observed (a
median of one or two dates is one of them, clouds' edges and all); for the other reducers, one will do."""

FEW_CLEAR_SHARE = 0.10
"""``clear_observations`` warns when over this share of a period's covered pixels are thinly observed."""


def check_clear_observations(report: dict[str, Any]) -> dict[str, str]:
    """Composite periods in which many covered pixels have few clear observations (after the mask)."""
    comp = report["composite"]
    need = FEW_CLEAR.get(comp["reducer"], 1)
    thin: list[tuple[str, float, float]] = []
    for step, hist in comp.get("clear_observations", {}).items():
        total = sum(hist)
        if total:
            thin.append((step, sum(hist[:need]) / total, hist[0] / total))
    bad = [t for t in thin if t[1] > FEW_CLEAR_SHARE]
    worst = max(thin, key=lambda t: t[1], default=None)
    excluded = report.get("mask", {}).get("exclude", [])
    shares = report.get("mask", {}).get("matched_share") or {}
    detail = (
        f"{len(bad)} of {len(thin)} {comp['period']} steps have over {FEW_CLEAR_SHARE:.0%} of their pixels with "
        f"fewer than {need} clear observation{'s' if need > 1 else ''}"
        + (f"; worst {worst[0][:10]}: {worst[1]:.0%} ({worst[2]:.0%} with none)" if worst else "")
    )
    longer = {"P16D": "P1M", "P1M": "P3M", "P3M": "P1Y", "P1Y": "all"}.get(comp["period"])
    advice = (
        f"a longer period (composite.period: {longer}) gives each pixel more dates" if longer else "more dates"
    ) + (f", or exclude fewer classes (mask.exclude: {excluded})" if excluded else "")
    if shares:
        advice += f"; of the mask's pixels these rules matched {rules_text(shares)}"
    return entry("clear_observations", bool(bad), detail, advice)


def check_nodata(report: dict[str, Any]) -> dict[str, str]:
    """Integer bands with no nodata value at all (no file, STAC item or ``inputs.nodata`` gives one, as for
    Sentinel-2's JP2s): the reads take the output's fill (0) as their nodata, which drops real zeros and
    keeps any other fill as data, so the user should say which value is fill."""
    bands = report.get("inputs", {}).get("bands") or {}
    dtypes = report.get("output", {}).get("dtypes") or {}
    missing = sorted(
        b
        for b, info in bands.items()
        if info.get("nodata") is None and not str(dtypes.get(b, "uint")).startswith("float")
    )
    return entry(
        "nodata",
        bool(missing),
        f"band(s) {', '.join(missing)} have no nodata value" if missing else "every integer band has a nodata value",
        f"neither the files, the STAC items nor the config give {', '.join(missing)} a nodata value, so the "
        "output's fill (0) is taken as theirs: a real 0 is dropped and any other fill value is averaged in as "
        "data; set inputs.nodata to the files' fill value",
    )

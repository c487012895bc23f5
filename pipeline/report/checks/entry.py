"""One diagnostic's entry (``{check, status, detail, advice}``) and the rounding of a config value that a
check's advice suggests: shared by every group of checks."""

from __future__ import annotations

import math


def entry(check: str, warn: bool, detail: str, advice: str) -> dict[str, str]:
    """The report's entry for ``check``: ``warn`` or ``ok``, with the advice only where it warns."""
    return {"check": check, "status": "warn" if warn else "ok", "detail": detail, "advice": advice if warn else ""}


def round_up(x: float) -> str:
    """A config value to suggest: ``x`` rounded up to 1, 2 or 5 times a power of ten."""
    if x <= 0:
        return "0"
    p = 10 ** math.floor(math.log10(x))
    v = next(m * p for m in (1, 2, 5, 10) if m * p >= x * (1 - 1e-9))
    return f"{v:g}"

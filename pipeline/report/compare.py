"""``pipeline report NEW.json --compare OLD.json``: what changed between two runs, stage by stage,
diagnostic by diagnostic and setting by setting, so that "did my change help?" has an answer."""

from __future__ import annotations

from typing import Any

from pipeline.report.summary import STAGES


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{dotted.key: value}``."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _verdict(old: str | None, new: str | None) -> str:
    if old is None:
        return "new check"
    if new is None:
        return "no longer checked"
    if old == "warn" and new == "ok":
        return "fixed"
    if old == "ok" and new == "warn":
        return "new warning"
    return "still warns" if new == "warn" else "ok"


def compare_reports(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Rows for each stage (and the wall), each diagnostic and each setting that differs: old, new, change."""
    rows = [("wall", old["wall_s"], new["wall_s"])] + [
        (s, old["stages"].get(s, 0.0), new["stages"].get(s, 0.0)) for s in STAGES
    ]
    stages = [
        {"stage": s, "old_s": a, "new_s": b, "delta_s": b - a, "ratio": b / a if a > 0 else None} for s, a, b in rows
    ]
    old_d = {d["check"]: d for d in old.get("diagnostics", [])}
    new_d = {d["check"]: d for d in new.get("diagnostics", [])}
    checks = list(new_d) + [c for c in old_d if c not in new_d]
    diagnostics = [
        {
            "check": c,
            "old": old_d[c]["status"] if c in old_d else None,
            "new": new_d[c]["status"] if c in new_d else None,
            "change": _verdict(old_d[c]["status"] if c in old_d else None, new_d[c]["status"] if c in new_d else None),
            "old_detail": old_d.get(c, {}).get("detail", ""),
            "new_detail": new_d.get(c, {}).get("detail", ""),
        }
        for c in checks
    ]
    old_cfg, new_cfg = _flat(old.get("resolved_config") or {}), _flat(new.get("resolved_config") or {})
    recorded = bool(old_cfg) and bool(new_cfg)  # reports before resolved_config hold none to compare
    settings = [
        {"key": k, "old": old_cfg.get(k), "new": new_cfg.get(k)}
        for k in sorted(set(old_cfg) | set(new_cfg))
        if recorded and old_cfg.get(k) != new_cfg.get(k) and not k.startswith("report.")
    ]
    for key, path in (("scheduler", ("execution", "scheduler")), ("workers", ("execution", "workers"))):
        a, b = old.get(path[0], {}).get(path[1]), new.get(path[0], {}).get(path[1])
        if a != b:
            settings.append({"key": f"{key} used", "old": a, "new": b})
    return {"stages": stages, "diagnostics": diagnostics, "settings": settings, "settings_recorded": recorded}


def headline(cmp: dict[str, Any]) -> str:
    """One sentence: how the new run's wall compares with the old one's."""
    wall = cmp["stages"][0]
    if not wall["ratio"]:
        return "the old run has no wall time to compare with"
    verb = "faster" if wall["delta_s"] < 0 else "slower"
    return (
        f"the new run took {wall['ratio']:.2f}x the old one's wall ({abs(wall['delta_s']):.2f} s {verb}: "
        f"{wall['old_s']:.2f} s -> {wall['new_s']:.2f} s)"
    )


def format_comparison(cmp: dict[str, Any]) -> str:
    """The comparison as text: the headline, the stage table, the diagnostics, the settings that differ."""
    lines = [headline(cmp), "", f"{'stage':<10}{'old s':>9}{'new s':>9}{'change s':>10}{'new/old':>9}"]
    for r in cmp["stages"]:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        lines.append(f"{r['stage']:<10}{r['old_s']:9.2f}{r['new_s']:9.2f}{r['delta_s']:+10.2f}{ratio:>9}")
    lines += ["", "diagnostics (old -> new):"]
    for d in cmp["diagnostics"]:
        lines.append(f"  {d['check']:<20}{d['old'] or '-':>5} -> {d['new'] or '-':<5} {d['change']}")
        if d["change"] in ("fixed", "new warning", "still warns"):
            lines.append(f"      old: {d['old_detail']}")
            lines.append(f"      new: {d['new_detail']}")
    same = "settings: the same" if cmp.get("settings_recorded", True) else "settings: not recorded in both reports"
    lines += ["", "settings that differ:" if cmp["settings"] else same]
    lines += [f"  {s['key']}: {s['old']!r} -> {s['new']!r}" for s in cmp["settings"]]
    return "\n".join(lines)

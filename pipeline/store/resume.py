"""Whether a store may be resumed by a config: the output settings it was made with against the config's,
named by the config keys a user writes (``output.chunks``, not the recorded ``output.chunks_yx``)."""

from __future__ import annotations

from typing import Any

from pipeline.errors import ConfigError, Switches

# Recorded settings (Config.output_settings) -> (the config key a user writes, how to show its value).
_YX = ("y", "x")


def _yx(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) == 2:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(_YX, value, strict=True)) + "}"
    return repr(value)


USER_KEYS: dict[str, tuple[str, Any]] = {
    "output.chunks_yx": ("output.chunks", _yx),
    "output.shards_yx": ("output.shards", _yx),
    "output.codec": ("output.compression.codec", repr),
    "output.level": ("output.compression.level", repr),
}


def setting_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(config key, the store's value, the config's value) for each recorded setting that differs."""
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            key, show = USER_KEYS.get(k, (k, repr))
            out.append((key, show(old.get(k)), show(new.get(k))))
    return out


def check_resumable(
    path: str, attrs: dict[str, Any], config_hash: str, settings: dict[str, Any], switches: Switches
) -> None:
    """Raise a ConfigError naming the first differing key, and every difference with both values, where the
    store at ``path`` (its attributes ``attrs``) was made with other output settings than ``settings``."""
    if attrs.get("pipeline_config_hash") == config_hash:
        return
    changes = setting_changes(attrs.get("pipeline_settings") or {}, settings)
    said = "; ".join(f"{k}: the store has {a}, the config has {b}" for k, a, b in changes)
    raise ConfigError(
        changes[0][0] if changes else "output.path",
        f"{path} was made with other output settings ({said or 'not recorded'}): resume it with the store's "
        f"settings, or pass {switches.overwrite} to replace it",
    )

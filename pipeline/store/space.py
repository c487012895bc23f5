"""The output's room: a write error sorted into "the device is full" or another store error, and the
message a full device gets (the device, its free bytes, the bytes the plan writes, how to resume)."""

from __future__ import annotations

import errno
import os
import shutil

from pipeline.errors import StoreError, StoreFullError, Switches
from pipeline.storage import redact, scheme

_FULL = ("No space left on device", "StorageFull", "os error 28", "Disk quota exceeded", "os error 122")


def first_part(text: str) -> str:
    """An error's message without the debug dump obstore appends (``Debug source: Generic {...}``)."""
    return text.split("\n\nDebug source")[0].split("\nDebug source")[0].strip()


def write_error(what: str, path: str, error: BaseException) -> StoreError:
    """The StoreError for a failed write of ``what`` to the store at ``path``: a :class:`StoreFullError`
    where the device is full (or a quota spent), else the error's first part, with no secret in it."""
    text = redact(first_part(str(error)))
    code = getattr(error, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or any(s in str(error) for s in _FULL):
        return StoreFullError(path, f"no space left on the device writing {what}")
    return StoreError(f"cannot write {what} to {path}: {text}")


def _mount_of(path: str) -> tuple[str, str]:
    """(mount point, device) holding ``path`` (its nearest existing folder); the device from /proc/mounts
    where the system has one, else the mount point again."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    device = p
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[1] == p:
                    device = parts[0]
    except OSError:
        pass
    return p, device


def full_message(error: StoreFullError, needed_bytes: int, left: int, total: int, switches: Switches) -> str:
    """What a full output device says: the device and its mount point, its free bytes, the bytes the
    plan still writes (raw: compressed chunks take less), and the command that resumes."""
    path = error.path
    where = path
    if scheme(path) == "file":
        mount, device = _mount_of(path)
        free = shutil.disk_usage(mount).free
        where = f"device {device} (mounted at {mount}, {free / 1e6:,.1f} MB free)"
    return (
        f"the output's {where} is full: {error.problem}. The plan writes "
        f"{needed_bytes / 1e6:,.1f} MB raw for the {left} of {total} partitions not finished (less once "
        f"compressed). Free space or move output.path, then rerun the same command with {switches.resume}: "
        "finished partitions are kept"
    )

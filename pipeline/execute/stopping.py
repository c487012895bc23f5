"""How a run stops when it cannot go on: Ctrl-C, or an output device with no room left. Either way the
partitions already finished stay in the store's journal, and the message says how many and how to
resume; the workers are shut down on the way out (the thread pool waits for its running tasks, a local
cluster is closed; its worker processes ignore Ctrl-C, :mod:`pipeline.execute.worker_signals`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline.errors import RunInterrupted, StoreFullError, Switches
from pipeline.planning.plan import Plan
from pipeline.report.progress import NoProgress
from pipeline.store.layout import journal_done
from pipeline.store.space import full_message

if TYPE_CHECKING:
    from pipeline.config import OutputConfig, StorageConfig

logger = logging.getLogger(__name__)


def _finished(output: OutputConfig, storage: StorageConfig, plan: Plan) -> int:
    """Partitions of ``plan`` the journal of the store at ``output.path`` records as finished (0 where it
    cannot be read)."""
    try:
        keys = set(plan.partitions.keys())
        return len(keys & journal_done(output.path, storage))
    except Exception as e:  # noqa: BLE001 - the count is for the message; the journal itself is intact
        logger.debug("journal not read: %s", e)
        return 0


@contextlib.contextmanager
def stopped_cleanly(
    output: OutputConfig, storage: StorageConfig, plan: Plan, switches: Switches, progress: NoProgress
) -> Iterator[None]:
    """Turn Ctrl-C into :class:`RunInterrupted` and a full device into a :class:`StoreFullError` whose
    message names the device, the bytes the plan still writes and how to resume (the store: ``output.path``,
    reached with ``storage``)."""
    try:
        yield
    except KeyboardInterrupt:
        progress.close()
        total = len(plan.partitions)
        raise RunInterrupted(output.path, _finished(output, storage, plan), total, switches.resume) from None
    except StoreFullError as e:
        progress.close()
        total = len(plan.partitions)
        left = total - _finished(output, storage, plan)
        needed = int(plan.bytes_out * left / max(total, 1))
        raise StoreFullError(e.path, full_message(e, needed, left, total, switches)) from None

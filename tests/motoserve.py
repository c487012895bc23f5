"""moto's S3 server as ``python -m moto.server`` runs it, less two costs it pays on every request.

- moto finds the service a request is for by listing its own package folder and testing ~200 entries with
  ``isdir``, under a lock that every request thread takes. The folder does not change while it runs: the
  list is read once.
- werkzeug formats a log line per request, which the tests send to /dev/null: its request log is off.

The S3 implementation, its HTTP server and its threads are moto's, unchanged. Run:
``python -m tests.motoserve -H 127.0.0.1 -p PORT`` (moto.server's arguments).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

from moto import backends
from moto.server import main

_list_of_moto_modules = backends.list_of_moto_modules


@functools.cache
def _modules_once() -> frozenset[str]:
    return frozenset(_list_of_moto_modules())


def _modules() -> Iterable[str]:
    return _modules_once()


if __name__ == "__main__":
    backends.list_of_moto_modules = _modules  # read by moto's dispatcher at each request
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    main()

"""The fork server's last import where the run chose the compiled kernels
(:func:`pipeline.execute.compiled_choice.choose`): numba and every compiled signature loaded from numba's cache
once, before the server forks, instead of in each worker's first task (~0.35 s; SciPy kept out of it:
:func:`~pipeline.resample.compiled.load_in_server`). Where that load fails (a broken numba or cache), the
server logs why and its workers run the NumPy kernels: it must not take the server, and the run, down."""

import logging

from pipeline.resample import compiled

try:
    compiled.load_in_server()
except Exception as e:  # noqa: BLE001 - any failure of a third-party compiler stack
    logging.getLogger("pipeline").warning(
        "compiled kernels failed to load (%s: %s); this run's workers use the NumPy kernels", type(e).__name__, e
    )
    compiled.kernels.cache_clear()
    compiled.disabled[0] = True

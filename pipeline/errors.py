"""One root exception; each subclass also inherits the builtin it resembles.

The CLI maps them onto exit codes: ``ConfigError`` -> 2, any other
``PipelineError`` -> 1.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(PipelineError, ValueError):
    """The config (or a --set override, or a CLI option) is wrong; the message names the key."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config key '{key}': {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.key, self.problem)


class InputError(PipelineError, ValueError):
    """The inputs cannot make a cube (none found, none usable, inconsistent); the message says which and why."""


class TileReadError(PipelineError, OSError):
    """A tile could not be opened or read; the message names the file (and window)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Rebuilt from its fields, so it survives the trip back from a Dask worker.
        return type(self), (self.path, self.problem)


class StoreError(PipelineError, OSError):
    """The output store cannot be created, written, or resumed."""


class StoreFullError(StoreError):
    """The output's device (disk, quota) has no room left; the run resumes once there is some."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.path, self.problem)


class DeviceError(PipelineError, RuntimeError):
    """A device was requested that this machine cannot provide."""


class WorkerError(PipelineError, RuntimeError):
    """A worker process of the run died (killed, out of memory) or sent back an error it could not pickle."""


class PlanCoverageError(PipelineError, RuntimeError):
    """The plan leaves empty a grid pixel that a source covers: a planning bug, not a user error
    (:func:`pipeline.planning.globe.check_coverage`)."""


class Switches:
    """How a message names the run's switches: the CLI's flags, or :func:`pipeline.run`'s arguments."""

    def __init__(self, overwrite: str, resume: str) -> None:
        self.overwrite = overwrite
        self.resume = resume

    def __repr__(self) -> str:
        return f"Switches({self.overwrite!r}, {self.resume!r})"


PYTHON_SWITCHES = Switches("overwrite=True", "resume=True")
"""The Python API's: ``pipeline.run(cfg, overwrite=True)``."""
CLI_SWITCHES = Switches("--overwrite", "--resume")
"""``pipeline run``'s flags."""


class RunInterrupted(PipelineError, KeyboardInterrupt):
    """The run was interrupted (Ctrl-C): what was finished is kept, and ``resume`` finishes the rest. A
    ``KeyboardInterrupt`` too, so code that stops on Ctrl-C still does."""

    def __init__(self, path: str, finished: int, total: int, resume: str) -> None:
        self.path = path
        self.finished = finished
        self.total = total
        self.resume = resume
        super().__init__(
            f"interrupted: {finished} of {total} partitions finished and kept in {path}; {resume} finishes the rest"
        )

    def __reduce__(self) -> tuple[type, tuple[str, int, int, str]]:
        return type(self), (self.path, self.finished, self.total, self.resume)

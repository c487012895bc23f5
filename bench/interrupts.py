"""Ctrl-C, many times: ``pipeline run`` of the small fixture started as a terminal's foreground job
(``tests/helpers.start_pipeline``), SIGINT to its process group once two partitions are journaled, and
each run must exit (130) within ``LIMIT_S``. A run that does not is a hang: its threads' stacks
(faulthandler, on SIGABRT) are saved to ``OUT/hang-N.txt``. ``BUSY`` processes spin beside the runs, as
another job's load would. Prints the count of runs, hangs and exit codes.

``python bench/interrupts.py OUT [RUNS] [SCHEDULER]`` (defaults: 100 runs, ``threads``; ``BUSY=3``,
``LIMIT_S=40``).
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests.helpers import start_pipeline, wait_journaled, write_config  # noqa: E402  (the project on sys.path)

SETS = ["--set", "execution.partition_mb=0.05", "--set", "output.chunks={y: 64, x: 64}", "--workers", "2"]


def small_fixture() -> str:
    """The small fixture's tiles (``make fixtures`` writes them)."""
    small = os.path.join(ROOT, "data_fixtures", "small")
    if not os.path.isdir(os.path.join(small, "2024-06-11")):
        subprocess.run([sys.executable, "-m", "pipeline", "fixtures", small, "--preset", "small"], check=True)
    return small


def interrupt_once(folder: Path, small: str, scheduler: str, limit_s: float) -> tuple[str, str]:
    """(outcome, stderr): the exit code as text, ``hang`` with the process's stacks where it did not exit
    after the signal, or ``stuck`` with them where it journaled no 2 partitions in 120 s."""
    from pipeline.store.layout import JOURNAL_DIR

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cfg = write_config(folder, os.path.join(small, "**", "*.tif"))
    proc = start_pipeline(["run", str(cfg), *SETS, "--set", f"execution.scheduler={scheduler}"])
    journal = folder / "out.zarr" / JOURNAL_DIR
    try:
        wait_journaled(proc, journal, 2)
    except AssertionError as e:  # stuck before its second partition: the stacks say where
        return "stuck", str(e)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=limit_s)
        return str(proc.returncode), err
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=60)
        return "hang", err


def main() -> None:
    out = Path(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    scheduler = sys.argv[3] if len(sys.argv) > 3 else "threads"
    limit_s = float(os.environ.get("LIMIT_S", "40"))
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(int(os.environ.get("BUSY", "3")))
    ]
    small, outcomes = small_fixture(), collections.Counter[str]()
    try:
        for n in range(runs):
            outcome, err = interrupt_once(out / "run", small, scheduler, limit_s)
            outcomes[outcome] += 1
            if outcome in ("hang", "stuck"):
                (out / f"{outcome}-{n}.txt").write_text(err)
            print(n, outcome, flush=True)
    finally:
        for p in busy:
            p.kill()
    print(f"{runs} runs on {scheduler}, {len(busy)} busy processes beside them: {dict(outcomes)}")


if __name__ == "__main__":
    main()

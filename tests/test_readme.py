"""The README's recipes, run as a user runs them: its Python snippets saved as scripts, its names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def workdir(tmp_path: Path, small_dir: Path) -> Path:
    """A folder laid out as the repository is for ``configs/small.yaml``: the config, the small fixture."""
    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "small.yaml", tmp_path / "configs" / "small.yaml")
    (tmp_path / "data_fixtures").mkdir()
    (tmp_path / "data_fixtures" / "small").symlink_to(small_dir, target_is_directory=True)
    return tmp_path


def _script(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    (folder / "script.py").write_text(code)
    return subprocess.run(
        [sys.executable, "script.py"], cwd=folder, capture_output=True, text=True, timeout=240, env=_env()
    )


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(ROOT)}


def test_the_readme_names_what_exists() -> None:
    code = (
        "import pipeline\n"
        "assert callable(pipeline.storage.zarr_store) and callable(pipeline.storage.storage_options)\n"
        "assert pipeline.Config and pipeline.plan and pipeline.run and pipeline.RunResult\n"
        "assert issubclass(pipeline.ConfigError, pipeline.PipelineError) and pipeline.InputError\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0, r.stderr


def test_the_from_python_snippet_runs_as_a_plain_script(workdir: Path) -> None:
    first = _snippets()[0]
    assert "__main__" not in first
    r = _script(workdir, first)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr == ""
    assert (workdir / "out" / "small.zarr" / "zarr.json").exists()
    assert "0 []" in r.stdout  # exit code and skipped, as printed


def test_the_snippet_runs_unguarded_when_its_run_starts_a_local_cluster(workdir: Path) -> None:
    """``auto`` picks a local cluster above 800 MB of planned work: the same script must keep working (Dask's
    worker processes would otherwise re-run it and die in freeze_support tracebacks)."""
    first = _snippets()[0].replace("overrides=[", 'overrides=["execution.scheduler=local-cluster", ', 1)
    assert "local-cluster" in first
    r = _script(workdir, first)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "freeze_support" not in r.stderr, r.stderr[-3000:]
    report = (workdir / "out" / "small.report.json").read_text()
    assert '"scheduler": "local-cluster"' in report


def test_the_client_snippet_runs_as_a_script(workdir: Path) -> None:
    second = _snippets()[1]
    assert 'if __name__ == "__main__":' in second
    r = _script(workdir, second)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().startswith("tcp://127.0.0.1:")


def test_the_demo_answers_the_case_studys_question_once(
    tmp_path: Path, casestudy_dir: Path, virtual_casestudy: Path
) -> None:
    """``pipeline demo`` prints one projection, labelled as the answer to "what would 7 TB in 3 minutes
    take", and says plainly when there is no GPU. Its two fixtures are the session's (the demo finds them
    made, as after `make fixtures` or an earlier demo)."""
    from pipeline.tools.demo import run_demo

    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "casestudy.yaml", tmp_path / "configs" / "casestudy.yaml")
    (tmp_path / "data_fixtures").mkdir()
    (tmp_path / "data_fixtures" / "casestudy").symlink_to(casestudy_dir, target_is_directory=True)
    (tmp_path / "data_fixtures" / "casestudy-full").symlink_to(virtual_casestudy, target_is_directory=True)
    lines: list[str] = []
    assert run_demo(str(tmp_path), echo=lines.append) in (0, 3)
    text = "\n".join(lines)
    assert text.count("workers to finish in 180 s") == 1 and text.count("What would 7 TB") == 1
    answer = text[text.index("What would 7 TB (192,000 files) in 3 minutes take") :]
    assert "scaled to 7 TB" in answer and "192,000 indexed files measured" in answer
    # The fixture is read from local disk: the bucket is priced at assumptions the answer names.
    assert "the bucket, not measured" in answer and "25.0 ms a request (assumed" in answer
    assert "in flight across the cluster" in answer
    assert "ModuleNotFoundError" not in text
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        assert "gpu_ran: 0 of" in text and "no GPU here (CuPy not installed" in text

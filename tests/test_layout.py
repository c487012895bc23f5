"""The layout's rules (docs/architecture.md), checked on every module's imports, top-level and inside
functions alike: imports go one way, cli/api -> execute -> stages -> kernels."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "pipeline"
KERNELS = {
    "methods",
    "coords",
    "kernels",
    "point",
    "weighted",
    "footprint",
    "rank",
    "common",
    "fuse",
    "parity",
    "compiled",
    "fused",
    "mask",
    "reduce",
}
"""The pure kernel modules of :mod:`pipeline.resample` (its ``warp`` and ``transform`` are stage glue)."""
STAGES = ("pipeline.inputs", "pipeline.planning", "pipeline.resample", "pipeline.store", "pipeline.report")


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every module of the package and the modules it imports (absolute names, relative ones resolved)."""
    out: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        name = _module(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    base = ".".join(name.split(".")[: -node.level] + [node.module])
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # `from pipeline.x import module`
        out[name] = found
    return out


IMPORTS = _imports()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _is_kernel(name: str) -> bool:
    return name.startswith("pipeline.resample.") and name.rsplit(".", 1)[1] in KERNELS


def _ours(imported: set[str]) -> set[str]:
    return {m for m in imported if m in IMPORTS}


def test_the_walk_finds_the_packages() -> None:
    assert {"pipeline.cli", "pipeline.execute.runner", "pipeline.inputs.catalog", "pipeline.resample.point"} <= set(
        IMPORTS
    )
    assert "pipeline.planning.plan" in IMPORTS["pipeline.execute.task"]


def test_kernels_import_only_numpy_and_each_other() -> None:
    """Kernels are pure: no rasterio, pyproj, dask, zarr, xarray or pyarrow, no other part of pipeline."""
    heavy = ("rasterio", "pyproj", "dask", "distributed", "zarr", "xarray", "pyarrow", "obstore", "affine")
    for name, imported in IMPORTS.items():
        if not _is_kernel(name):
            continue
        assert not [m for m in imported if m.split(".")[0] in heavy], name
        assert all(_is_kernel(m) or m == "pipeline.resample" for m in _ours(imported)), (name, _ours(imported))


def test_stages_never_import_execute_api_cli_or_tools() -> None:
    for name, imported in IMPORTS.items():
        if any(_within(name, s) for s in (*STAGES, "pipeline.storage")) or name == "pipeline.errors":
            upward = [
                m
                for m in _ours(imported)
                if _within(m, "pipeline.execute")
                or m in ("pipeline.api", "pipeline.cli")
                or _within(m, "pipeline.tools")
            ]
            assert upward == [], (name, upward)


NAME_TABLES = {"pipeline.execute.executors": "pipeline.config", "pipeline.resample.methods": "pipeline.config"}
"""The tables of names that a package above reads from the package that owns them (the config validates
``execution.scheduler`` and ``resampling`` against them), so that an executor or a method is added in its own
package alone: each imports nothing."""


def test_only_the_entry_points_import_execute() -> None:
    """... and the config, which reads the executors' names (:data:`NAME_TABLES`)."""
    allowed = ("pipeline.execute", "pipeline.api", "pipeline.cli", "pipeline.tools")
    for name, imported in IMPORTS.items():
        upward = {m for m in _ours(imported) if _within(m, "pipeline.execute")}
        upward -= {
            m for m in upward if any(_within(m, t) for t, reader in NAME_TABLES.items() if _within(name, reader))
        }
        if name != "pipeline" and upward:
            assert any(_within(name, a) for a in allowed), (name, upward)


def test_the_tables_of_names_import_nothing() -> None:
    """The tables :data:`NAME_TABLES` lets the config read import nothing but ``__future__`` and dataclasses:
    reading them costs the config no stage's imports (nor NumPy)."""
    for table in NAME_TABLES:
        assert IMPORTS[table] <= {"__future__", "__future__.annotations", "dataclasses", "dataclasses.dataclass"}, (
            table,
            IMPORTS[table],
        )


def test_nothing_imports_the_cli_and_only_the_cli_imports_the_api() -> None:
    """(The package's ``__init__`` names the API's objects for type checkers; at run time they load lazily.)"""
    for name, imported in IMPORTS.items():
        if name != "pipeline.__main__":
            assert "pipeline.cli" not in imported, name
        if name not in ("pipeline.cli", "pipeline"):
            assert "pipeline.api" not in imported, name


def test_planning_and_report_do_no_io() -> None:
    """Planning is pure and the report works on the records it is handed: neither imports a reader,
    a store, another stage's I/O or the object-store layer."""
    io = ("rasterio", "obstore", "zarr", "pipeline.storage", "pipeline.inputs.read", "pipeline.store")
    for name, imported in IMPORTS.items():
        if _within(name, "pipeline.planning") or _within(name, "pipeline.report"):
            assert not [m for m in imported if any(_within(m, p) for p in io)], name


CONFIG_HOLDERS = ("pipeline.execute.runner", "pipeline.execute.prepare")
"""The modules of ``execute/`` that hold the whole config: the run's wiring, and its preparation, which hands
each stage its sections."""
WHOLE_CONFIG = ("pipeline.config.model.Config", "pipeline.config.Config")
"""The whole config's class, as :data:`IMPORTS` records ``from pipeline.config.model import Config`` and
``from pipeline.config import Config``."""


def _whole_config_imports(imports: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, import) of each stage module, and each ``execute/`` module but :data:`CONFIG_HOLDERS`, that
    imports the whole config's class."""
    found = []
    for name, imported in sorted(imports.items()):
        stage = any(_within(name, s) for s in (*STAGES, "pipeline.storage"))
        executing = _within(name, "pipeline.execute") and name not in CONFIG_HOLDERS
        if stage or executing:
            found += [(name, m) for m in WHOLE_CONFIG if m in imported]
    return found


def test_the_config_check_finds_the_whole_config() -> None:
    imports = {
        "pipeline.inputs.files": {"pipeline.config", "pipeline.config.Config"},
        "pipeline.execute.schedulers": {"pipeline.config.model", "pipeline.config.model.Config"},
        "pipeline.store.cube": {"pipeline.config", "pipeline.config.OutputConfig"},
        "pipeline.execute.runner": {"pipeline.config", "pipeline.config.Config"},
        "pipeline.cli": {"pipeline.config.model", "pipeline.config.model.Config"},
    }
    assert _whole_config_imports(imports) == [
        ("pipeline.execute.schedulers", "pipeline.config.model.Config"),
        ("pipeline.inputs.files", "pipeline.config.Config"),
    ]


def test_stages_take_their_sections_not_the_whole_config() -> None:
    """Each stage takes its own sections of the config (``config.inputs``, ``config.storage``...) and plain
    values, never the whole ``Config``: only the entry points (``cli``, ``api``, ``tools/``), the runner and
    its preparation (:mod:`pipeline.execute.prepare`, which hands the sections out) import it, at the top,
    inside functions or for type checkers alike."""
    assert _whole_config_imports(IMPORTS) == []


SOURCES = ("pipeline.inputs.files", "pipeline.inputs.stac", "pipeline.inputs.stac_parquet")
"""The sources of tiles: each feeds the one builder, :mod:`pipeline.inputs.catalog`."""


def test_sources_feed_one_builder_and_never_import_each_other() -> None:
    """No import circle in ``inputs/``: sources import the shared rules (headers, STAC fields, the table),
    never each other nor the builder; the builder is the only module that imports a source, except
    that the STAC source reads stac-geoparquet through its reader."""
    for name in SOURCES:
        ours = _ours(IMPORTS[name])
        others = {m for m in ours if m in SOURCES and m != name}
        if name == "pipeline.inputs.stac":
            others.discard("pipeline.inputs.stac_parquet")  # the STAC source's reader of .parquet files
        assert others == set(), (name, others)
        assert "pipeline.inputs.catalog" not in ours, name
    for name, imported in IMPORTS.items():
        if name in SOURCES or name in ("pipeline.inputs.catalog", "pipeline.inputs", "pipeline.tools.fixtures"):
            continue
        sources = [m for m in _ours(imported) if m in SOURCES]
        assert sources == [] or name.startswith("pipeline.tools"), (name, sources)
    assert "pipeline.inputs.stac" not in _ours(IMPORTS["pipeline.inputs.stac_parquet"])


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from pipeline.x import name`` is recorded both as
    ``pipeline.x`` and ``pipeline.x.name``: only the real modules count. A module's own packages (its
    ``__init__`` files) do not: Python imports them before the module anyway, and a module importing a
    name its package re-exports is no circle."""
    return {
        name: {m for m in _ours(imported) if not (name == m or name.startswith(m + "."))}
        for name, imported in IMPORTS.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's circles: each strongly connected set of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = [stack.pop()]
            while group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_circle_finder_finds_circles() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_circles() -> None:
    """No two modules import each other, directly or through others, at the top or inside functions:
    what both need lives in a module below both."""
    graph = _graph()
    circles = _circles(graph)
    edges = [[f"{v} -> {sorted(graph[v] & set(c))}" for v in c] for c in circles]
    assert circles == [], edges


def test_the_config_imports_no_stage_but_the_tables_of_names() -> None:
    """The config serves every stage: of the packages above it, it imports only the tables of names
    (:data:`NAME_TABLES`), never a stage's code."""
    above = (*STAGES, "pipeline.execute", "pipeline.storage", "pipeline.api", "pipeline.cli", "pipeline.tools")
    for name, imported in IMPORTS.items():
        if _within(name, "pipeline.config"):
            reached = {m for m in _ours(imported) if any(_within(m, p) for p in above)}
            assert {m for m in reached if not any(_within(m, t) for t in NAME_TABLES)} == set(), name


MAX_LINES = 500
"""A module of the package holds at most this many lines: one past it is split by responsibility."""


def test_no_module_is_over_the_line_limit() -> None:
    sizes = {str(p.relative_to(PKG.parent)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
    assert max(sizes.values()) > 200  # the walk reads the modules

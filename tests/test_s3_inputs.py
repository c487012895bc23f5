"""Inputs in object storage, against a real S3 server (moto on loopback): globs over a bucket, the tile
index for objects, remote reads giving the local cube bit for bit (also through a faulty network), the
report's network section, and the errors a user meets (exit 2 and 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from pipeline.config import StorageConfig, load_config
from pipeline.errors import ConfigError
from pipeline.execute.runner import plan_run, run
from pipeline.inputs.catalog import build_catalog, find_inputs
from pipeline.report.diagnostics import compute_diagnostics
from pipeline.report.summary import format_report
from pipeline.storage import list_objects
from tests.faultproxy import FaultProxy
from tests.helpers import PATTERN, write_config
from tests.s3server import TEST_CREDENTIALS, free_port, start_moto, upload_tree

BANDS = ("B01", "B02", "B04", "B11")


def s3_config(folder: Path, bucket: str, endpoint: str, *overrides: str, glob: str = "tiles/**/*.tif", **sections: Any):
    """A config reading ``s3://bucket/<glob>`` from ``endpoint``, output local, small chunks, 1 worker."""
    folder.mkdir(parents=True, exist_ok=True)
    sections.setdefault("storage", {"endpoint_url": endpoint})
    sections.setdefault("execution", {"workers": 1, "partition_mb": 1})
    path = write_config(folder, f"s3://{bucket}/{glob}", **sections)
    return load_config(path, list(overrides))


def assert_same_cube(a: str, b: str) -> None:
    za, zb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
    for band in BANDS:
        got = zb[band][:]
        assert (got != za[band].fill_value).mean() > 0.5, f"{band}: mostly nodata"
        np.testing.assert_array_equal(za[band][:], got, err_msg=band)
    np.testing.assert_array_equal(za["time"][:], zb["time"][:])


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, small_dir: Path) -> Any:
    """The reference: the small fixture read from local disk (1 worker)."""
    folder = tmp_path_factory.mktemp("local")
    cfg = load_config(
        write_config(folder, str(small_dir / "**" / "*.tif"), execution={"workers": 1, "partition_mb": 1})
    )
    return cfg, run(cfg)


@pytest.fixture
def tiles(s3_server: Any, s3_bucket: str, small_dir: Path) -> list[str]:
    """The small fixture uploaded to ``s3://<bucket>/tiles/``; the object URLs."""
    return upload_tree(s3_server.client(), small_dir, s3_bucket, "tiles")


def test_s3_glob_run_gives_the_local_cube_bit_for_bit(tmp_path, s3_server, s3_bucket, tiles, local_run):
    local_cfg, local = local_run
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url, execution={"workers": 2, "partition_mb": 1})
    result = run(cfg)
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert result.report["inputs"]["files"] == local.report["inputs"]["files"] == len(tiles)
    assert_same_cube(local_cfg.output.path, cfg.output.path)
    net = result.report["network"]
    assert net["requests"] > 0 and net["bytes_fetched"] > 0 and net["bytes_needed"] > 0
    assert net["retries"] == 0 and net["latency_ms"]["p50"] > 0
    assert local.report["network"]["requests"] == 0  # local reads make no request
    amplification = next(d for d in result.report["diagnostics"] if d["check"] == "read_amplification")
    assert amplification["status"] == ("warn" if net["bytes_fetched"] > 2 * net["bytes_needed"] else "ok")
    wasteful = {**result.report, "network": {**net, "bytes_needed": net["bytes_fetched"] // 3}}
    warned = next(d for d in compute_diagnostics(wasteful) if d["check"] == "read_amplification")
    assert warned["status"] == "warn" and "3.0x" in warned["detail"] and "inputs.gdal_env" in warned["advice"]
    assert f"network: {net['requests']} requests" in format_report(result.report)
    text = str(result.report)
    assert TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in text and TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"] not in text


def test_a_glob_is_one_listing_and_matches_keys_client_side(s3_server, s3_bucket, tiles):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="tiles/deep/er/2024-06-01/X_B01.tif", Body=b"x")
    client.put_object(Bucket=s3_bucket, Key="tiles/2024-06-01/notes.txt", Body=b"x")
    with FaultProxy(s3_server.endpoint_url, error_rate=0, reset_rate=0, delay_rate=0) as proxy:
        storage = StorageConfig(endpoint_url=proxy.url)
        deep = list_objects(f"s3://{s3_bucket}/tiles/**/*.tif", storage)
        assert proxy.counts["requests"] == 1  # 33 objects: one listing request, none per object
        shallow = list_objects(f"s3://{s3_bucket}/tiles/*/*_B01.tif", storage)
        top = list_objects(f"s3://{s3_bucket}/tiles/*.tif", storage)
    assert len(deep) == len(tiles) + 1
    assert sorted(u for u, *_ in shallow) == sorted(u for u in tiles if u.endswith("_B01.tif"))  # * stays in a folder
    assert top == []
    url, size, mtime, etag = deep[0]
    assert size > 0 and mtime > 0 and etag


def test_mixed_local_and_s3_paths_keep_sorted_order(tmp_path, s3_server, s3_bucket, small_dir):
    upload_tree(s3_server.client(), small_dir / "2024-06-01", s3_bucket, "tiles/2024-06-01")
    paths = f"inputs.paths=[{small_dir}/2024-06-11/*.tif, s3://{s3_bucket}/tiles/2024-06-01/*.tif]"
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url, paths)
    paths = find_inputs(cfg.inputs, cfg.storage)
    assert paths == sorted(paths)
    remote = [p for p in paths if p.startswith("s3://")]
    local = [p for p in paths if p.startswith(str(small_dir))]
    assert len(remote) == len(list((small_dir / "2024-06-01").glob("*.tif")))
    assert len(local) == len(list((small_dir / "2024-06-11").glob("*.tif")))
    assert len(paths) == len(remote) + len(local)


def test_index_keyed_by_etag_and_trusted_without_the_store(tmp_path, s3_server, s3_bucket, tiles, small_dir):
    index = str(tmp_path / "index.parquet")
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url, f"inputs.index={index}")
    first = build_catalog(cfg.inputs, cfg.storage)
    assert first.headers_read == len(tiles) and not first.skipped
    again = build_catalog(cfg.inputs, cfg.storage)
    assert again.headers_read == 0  # nothing changed: no object re-opened
    assert again.network is None or again.network["requests"] == 0
    # Same key, same size, new content: a new ETag, so that object alone is read again.
    key = tiles[0].split(f"{s3_bucket}/", 1)[1]
    local = small_dir / key.split("tiles/", 1)[1]
    client = s3_server.client()
    body = local.read_bytes()
    changed = body[:-1] + bytes([body[-1] ^ 0xFF])  # the last byte flipped: the content surely differs
    client.put_object(Bucket=s3_bucket, Key=key, Body=changed)
    assert build_catalog(cfg.inputs, cfg.storage).headers_read == 1
    # trust_index: no request to the store at all, so a dead endpoint plans the same tiles.
    dead = f"http://127.0.0.1:{free_port()}"
    trusted = s3_config(tmp_path / "t", s3_bucket, dead, f"inputs.index={index}", "inputs.trust_index=true")
    catalog, plan = plan_run(trusted)
    assert len(catalog.tiles) == len(tiles) and len(plan.partitions) > 0
    assert list(catalog.tiles["path"]) == sorted(tiles)
    # A run does check, once, that the store answers before it writes anything.
    with pytest.raises(ConfigError) as err:
        run(trusted)
    assert err.value.key == "storage.endpoint_url" and dead in str(err.value)
    assert not os.path.exists(trusted.output.path)


def test_an_unreadable_object_is_skipped_and_a_missing_one_is_a_config_error(tmp_path, s3_server, s3_bucket, tiles):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="tiles/2024-06-01/T99Z9_B01.tif", Body=b"not a tiff")
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url)
    result = run(cfg)
    assert result.exit_code == 3
    skipped = {s["path"]: s["error"] for s in result.report["inputs"]["skipped"]}
    assert set(skipped) == {f"s3://{s3_bucket}/tiles/2024-06-01/T99Z9_B01.tif"}
    assert result.report["inputs"]["files"] == len(tiles)
    # a key that does not exist matches nothing: exit 2 naming it, though the glob beside it matches
    missing = f"s3://{s3_bucket}/tiles/2024-06-09/T00A0_B01.tif"
    with pytest.raises(ConfigError, match=r"inputs\.paths.*no object matched .*T00A0_B01\.tif.*the other 1 matched"):
        paths = f"inputs.paths=[s3://{s3_bucket}/tiles/**/*.tif, {missing}]"
        run(s3_config(tmp_path / "missing", s3_bucket, s3_server.endpoint_url, paths))


def test_an_object_gone_after_indexing_is_skipped_at_read(tmp_path, s3_server, s3_bucket, tiles):
    index = str(tmp_path / "index.parquet")
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url, f"inputs.index={index}", "inputs.trust_index=false")
    build_catalog(cfg.inputs, cfg.storage)
    gone = tiles[0]
    s3_server.client().delete_object(Bucket=s3_bucket, Key=gone.split(f"{s3_bucket}/", 1)[1])
    trusted = s3_config(
        tmp_path / "t", s3_bucket, s3_server.endpoint_url, f"inputs.index={index}", "inputs.trust_index=true"
    )
    result = run(trusted)
    assert result.exit_code == 3
    assert [s["path"] for s in result.report["inputs"]["skipped"]] == [gone]


def _cli_run(cfg_path: Path, *sets: str, extra: tuple[str, ...] | list[str] = ()) -> subprocess.CompletedProcess[str]:
    args = [a for s in sets for a in ("--set", s)] + list(extra)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(cfg_path), *args], capture_output=True, text=True, timeout=300
    )


def test_unknown_bucket_and_wrong_endpoint_exit_2_naming_them(tmp_path, s3_server, s3_bucket, tiles):
    path = write_config(
        tmp_path, f"s3://no-such-bucket-{s3_bucket}/tiles/**/*.tif", storage={"endpoint_url": s3_server.endpoint_url}
    )
    r = _cli_run(path)
    assert r.returncode == 2, r.stderr
    assert "config key 'inputs.paths'" in r.stderr and f"no-such-bucket-{s3_bucket}" in r.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    r = _cli_run(path, f"inputs.paths=[s3://{s3_bucket}/tiles/**/*.tif]", f"storage.endpoint_url={dead}")
    assert r.returncode == 2, r.stderr
    assert "config key 'storage.endpoint_url'" in r.stderr and dead in r.stderr
    for text in (r.stderr, r.stdout):
        assert TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in text and "Traceback" not in text
    assert not (tmp_path / "out.zarr").exists()


def test_refused_credentials_exit_2_without_the_secret(tmp_path, s3_server, monkeypatch):
    """moto checks access keys against its IAM once INITIAL_NO_AUTH_ACTION_COUNT requests are spent:
    with 0, the test credentials are unknown to it, as revoked ones would be to AWS."""
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
    with start_moto() as server:
        path = write_config(tmp_path, "s3://some-bucket/tiles/**/*.tif", storage={"endpoint_url": server.endpoint_url})
        r = _cli_run(path)
        assert r.returncode == 2, r.stderr
        assert "config key 'storage'" in r.stderr and "InvalidAccessKeyId" in r.stderr
        for secret in (TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"]):
            assert secret not in r.stderr and secret not in r.stdout
        storage = StorageConfig(endpoint_url=server.endpoint_url)
        with pytest.raises(ConfigError) as err:
            list_objects("s3://some-bucket/tiles/**/*.tif", storage)
        assert err.value.key == "storage"
        message = str(err.value)
        assert "some-bucket" in message and server.endpoint_url in message
        assert TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in message
        assert TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"] not in message


def test_reads_through_a_faulty_network_give_the_same_cube_and_count_retries(
    tmp_path, s3_server, s3_bucket, tiles, local_run
):
    """Through the CLI with -q: the driver's header reads count their retries too."""
    local_cfg, _ = local_run
    with FaultProxy(s3_server.endpoint_url, seed=7, error_rate=0.15, reset_rate=0.1, delay_rate=0.1) as proxy:
        cfg_path = write_config(
            tmp_path,
            f"s3://{s3_bucket}/tiles/**/*.tif",
            storage={"endpoint_url": proxy.url},
            execution={"workers": 1, "partition_mb": 1},
        )
        r = _cli_run(cfg_path, "inputs.gdal_env={GDAL_HTTP_RETRY_DELAY: 0.05}", extra=["-q"])
    assert proxy.counts["slow_down"] > 0 and proxy.counts["reset"] > 0, proxy.counts
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "out.report.json").read_text())
    assert_same_cube(local_cfg.output.path, str(tmp_path / "out.zarr"))
    # The faults on GDAL reads were retried (the cube is the same) and the retries GDAL logged counted, no
    # more than faults there were. GDAL does not log every retry ("Retrying again in"): a fault met by a
    # caller re-reading, rather than by the request's own retry, is not, so the count is a lower bound
    # whose value depends on which requests the seed faults. The listing's faults are obstore's.
    gdal_faults = [line for line in proxy.faulted if "list-type=" not in line]
    assert gdal_faults and 0 < report["network"]["retries"] <= len(gdal_faults), proxy.faulted
    assert "Retrying" not in r.stderr  # -q: counted, not printed


def test_https_urls_taken_as_given_next_to_a_local_glob(tmp_path, s3_server, s3_bucket, small_dir, local_run):
    """Plain URLs (here moto's http:// URLs of public objects, read unsigned) and a local glob in one run."""
    local_cfg, _ = local_run
    client = s3_server.client()
    urls = upload_tree(client, small_dir / "2024-06-01", s3_bucket, "tiles/2024-06-01")
    for url in urls:
        client.put_object_acl(Bucket=s3_bucket, Key=url.split(f"{s3_bucket}/", 1)[1], ACL="public-read")
    http = [u.replace("s3://", f"{s3_server.endpoint_url}/") for u in urls]
    inputs = {"paths": [*http, str(small_dir / "2024-06-11" / "*.tif")], "pattern": PATTERN}
    cfg = load_config(write_config(tmp_path, "", inputs=inputs, execution={"workers": 1, "partition_mb": 1}))
    result = run(cfg)
    assert result.exit_code == 0, result.report["inputs"]["skipped"]
    assert result.report["inputs"]["files"] == len(list(small_dir.rglob("*.tif")))
    assert result.report["inputs"]["bytes"] == sum(p.stat().st_size for p in small_dir.rglob("*.tif"))
    assert_same_cube(local_cfg.output.path, cfg.output.path)
    assert result.report["network"]["requests"] > 0


@pytest.mark.parametrize("option", ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GDAL_HTTP_HEADERS"])
def test_a_credential_in_gdal_env_is_refused(tmp_path, small_dir, option):
    path = write_config(tmp_path, str(small_dir / "**" / "*.tif"))
    with pytest.raises(ConfigError) as err:
        load_config(path, [f"inputs.gdal_env={{{option}: sekrit-value-123}}"])
    assert err.value.key == "inputs.gdal_env" and option in str(err.value)
    assert "sekrit-value-123" not in str(err.value)


def test_the_index_can_live_in_the_bucket(tmp_path, s3_server, s3_bucket, tiles):
    index = f"s3://{s3_bucket}/index/tiles.parquet"
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url, f"inputs.index={index}")
    assert build_catalog(cfg.inputs, cfg.storage).headers_read == len(tiles)
    assert s3_server.client().head_object(Bucket=s3_bucket, Key="index/tiles.parquet")["ContentLength"] > 0
    again = build_catalog(cfg.inputs, cfg.storage)
    assert again.headers_read == 0 and len(again.tiles) == len(tiles)
    trusted = s3_config(
        tmp_path / "t", s3_bucket, s3_server.endpoint_url, f"inputs.index={index}", "inputs.trust_index=true"
    )
    assert list(build_catalog(trusted.inputs, trusted.storage).tiles["path"]) == sorted(tiles)


@pytest.mark.parametrize(
    ("pattern", "prefix", "matches", "misses"),
    [
        ("l2a/**/*.tif", "l2a/", ["l2a/a.tif", "l2a/x/y/b.tif"], ["l2a/a.tiff", "l2b/a.tif", "l2a/x/a.TIF"]),
        ("l2a/*/B04.tif", "l2a/", ["l2a/t1/B04.tif"], ["l2a/B04.tif", "l2a/t1/t2/B04.tif"]),
        ("a/2024-0[6-7]-??/*.tif", "a/", ["a/2024-06-01/x.tif", "a/2024-07-31/y.tif"], ["a/2024-08-01/x.tif"]),
        ("**/*.tif", "", ["a.tif", "x/y/a.tif"], ["a.tif.aux.xml"]),
        ("a/b.tif", "a/b.tif", ["a/b.tif"], ["a/b.tiff", "a/xb.tif"]),
    ],
)
def test_key_globs(pattern, prefix, matches, misses):
    from pipeline.storage import glob_prefix, glob_regex

    assert glob_prefix(pattern) == prefix
    rx = glob_regex(pattern)
    assert all(rx.match(k) for k in matches) and not any(rx.match(k) for k in misses)


def test_the_fault_proxy_is_deterministic_and_lets_retries_through(s3_server, s3_bucket):
    import urllib.error
    import urllib.request

    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"payload", ACL="public-read")

    def attempts(proxy: FaultProxy) -> list[str]:
        out = []
        for _ in range(3):  # max_faults=2: the third try of one request always goes through
            try:
                with urllib.request.urlopen(f"{proxy.url}/{s3_bucket}/k", timeout=10) as r:
                    out.append(r.read().decode())
                    break
            except urllib.error.HTTPError as e:
                out.append(str(e.code))
            except (ConnectionError, urllib.error.URLError) as e:
                out.append(type(e).__name__)
        return out

    for seed in range(4):
        with FaultProxy(s3_server.endpoint_url, seed=seed, error_rate=0.5, reset_rate=0.3, delay_rate=0) as a:
            got_a = attempts(a)
        with FaultProxy(s3_server.endpoint_url, seed=seed, error_rate=0.5, reset_rate=0.3, delay_rate=0) as b:
            got_b = attempts(b)
        assert got_a == got_b and got_a[-1] == "payload"


def test_workers_get_credentials_set_after_the_fork_server_started(tmp_path, s3_server, s3_bucket, tiles):
    """A notebook's order: the fork server starts (first run), then credentials enter the environment."""
    cfg = s3_config(tmp_path, s3_bucket, s3_server.endpoint_url)
    script = (
        "import os\n"
        "from pipeline.execute.workers import start_worker_server\n"
        "from pipeline.config import load_config\n"
        "from pipeline.execute.runner import run\n"
        "if __name__ == '__main__':\n"
        "    start_worker_server()\n"
        f"    os.environ.update({TEST_CREDENTIALS!r})\n"
        f"    result = run(load_config({cfg.source!r}))\n"
        "    print('exit', result.exit_code, result.report['inputs']['skipped'][:1])\n"
    )
    (tmp_path / "notebook.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in TEST_CREDENTIALS}
    r = subprocess.run(
        [sys.executable, str(tmp_path / "notebook.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert "exit 0 []" in r.stdout, r.stdout + r.stderr[-2000:]

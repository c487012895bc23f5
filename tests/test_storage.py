"""The storage layer against a real S3 server (moto on loopback): listing, GDAL reads, redaction."""

from __future__ import annotations

import os

import obstore
import rasterio

from pipeline.config import StorageConfig
from pipeline.storage import gdal_options, object_store, rasterio_session, redact, vsi_path
from tests.s3server import upload_tree


def test_list_and_read_through_gdal(s3_server, s3_bucket, small_dir):
    urls = upload_tree(s3_server.client(), small_dir, s3_bucket, "tiles")
    storage = StorageConfig(endpoint_url=s3_server.endpoint_url)
    store = object_store(f"s3://{s3_bucket}/tiles", storage)
    listed = sorted(f"s3://{s3_bucket}/tiles/{m['path']}" for batch in obstore.list(store) for m in batch)
    assert listed == sorted(urls)
    local = small_dir / urls[0].split("/tiles/", 1)[1]
    env = rasterio.Env(session=rasterio_session(storage), **gdal_options(storage))
    with env, rasterio.open(vsi_path(urls[0])) as ds:
        remote = ds.read(1)
    with rasterio.open(local) as ds:
        assert (remote == ds.read(1)).all()


def test_redact_removes_the_secret_from_text():
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") or "abc123secretvalue"
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", secret)
    text = f"failed: aws_secret_access_key={secret} X-Amz-Signature=deadbeef"
    out = redact(text)
    assert secret not in out and "deadbeef" not in out and "failed" in out

"""GPU activity kinds and copy directions."""

from __future__ import annotations

import gzip
import json

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import gpu_activity, memory_operations


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_activity_kinds(job):
    table = gpu_activity(job).set_index("activity")
    assert table.loc["kernel", "total_us"] == 110
    assert table.loc["memcpy", "total_us"] == 5
    assert table.loc["memset", "total_us"] == 10
    assert table["pct"].sum() == pytest.approx(100)


def test_memory_operations_by_direction(job):
    table = memory_operations(job).set_index("kind")
    assert table.loc["HtoD", "bytes"] == 1000
    assert table.loc["memset", "bytes"] == 64
    assert set(table.index) == {"HtoD", "memset"}


def test_cuda_sync_time_is_its_own_activity(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    path = shared_fixtures / "kineto" / "a100_alexnet_cuda_sync.json.gz"
    with gzip.open(path, "rt") as handle:
        raw = json.load(handle)["traceEvents"]
    sync_us = sum(e["dur"] for e in raw if e.get("cat") == "cuda_sync")
    copy_bytes = sum(
        e["args"]["bytes"] for e in raw if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]
    )

    job = open_job(path, cache_dir=tmp_path)
    assert gpu_activity(job).set_index("activity").loc["sync", "total_us"] == sync_us
    copies = memory_operations(job).set_index("kind")
    assert copies.loc["HtoD", "bytes"] == copy_bytes

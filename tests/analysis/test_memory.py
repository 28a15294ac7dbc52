"""Memory timeline from allocator events, downsampled to peaks."""

from __future__ import annotations

import gzip
import json

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import memory_timeline
from stepscope.errors import ConfigError


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_allocated_and_reserved_points(job):
    table = memory_timeline(job, max_points=10)
    assert table["time_us"].tolist() == [5, 30]
    assert table["allocated_bytes"].tolist() == [100, 50]
    assert table["reserved_bytes"].tolist() == [2000, 2000]
    assert (table["device"] == 0).all()
    with pytest.raises(ConfigError):
        memory_timeline(job, max_points=0)


def test_real_trace_is_bounded_and_keeps_the_peak(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    path = shared_fixtures / "kineto" / "v100_rank1of2_memory.json.gz"
    with gzip.open(path, "rt") as handle:
        raw = json.load(handle)["traceEvents"]
    cuda = [e["args"] for e in raw if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1]
    peak = max(a["Total Allocated"] for a in cuda)

    table = memory_timeline(open_job(path, cache_dir=tmp_path), max_points=200)
    gpu = table[table["device"] == 1]
    assert 0 < len(gpu) <= 200
    assert gpu["allocated_bytes"].max() == peak
    assert gpu["events"].sum() == len(cuda)

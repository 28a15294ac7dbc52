"""The cache of a Kineto trace is rebuilt when it was converted by another version of the reader."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.store import open_job
from stepscope.store.kineto import READER_VERSION


def _events(job) -> int:
    con = job.connect()
    try:
        return int(con.sql("SELECT count(*) FROM events").fetchall()[0][0])
    finally:
        con.close()


def _tamper(cache: Path, *, version: int | None) -> str:
    """Make the cached rows of the one trace stale: keep 3 of its rows, record ``version``."""
    manifest_path = cache / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    ((raw, entry),) = manifest["files"].items()
    segment = cache / entry["segment"]
    pq.write_table(pq.read_table(segment).slice(0, 3), segment)
    if version is None:
        del entry["kineto"]["reader_version"]
    else:
        entry["kineto"]["reader_version"] = version
    manifest_path.write_text(json.dumps(manifest))
    return raw


@pytest.mark.parametrize("version", [None, READER_VERSION - 1])
def test_a_trace_converted_by_another_reader_version_is_read_again(tmp_path, version):
    folder = tmp_path / "traces"
    folder.mkdir()
    synthetic.write_trace(folder)
    events = len([e for e in synthetic.events() if e["ph"] in ("X", "i", "C")])
    cache = tmp_path / "cache"
    first = open_job(folder, cache_dir=cache)
    first.refresh()
    assert _events(first) == events
    assert first.metadata["ranks"][0]["kineto"]["reader_version"] == READER_VERSION
    raw = _tamper(cache, version=version)

    again = open_job(folder, cache_dir=cache)
    assert again.refresh()
    assert again.last_refresh_files == [raw]
    assert _events(again) == events
    # the rebuilt entry carries this version: the next refresh reads nothing
    third = open_job(folder, cache_dir=cache)
    assert not third.refresh()
    assert third.last_refresh_files == []


def test_a_trace_converted_by_this_reader_version_is_not_read_again(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    synthetic.write_trace(folder)
    cache = tmp_path / "cache"
    open_job(folder, cache_dir=cache).refresh()
    _tamper(cache, version=READER_VERSION)
    again = open_job(folder, cache_dir=cache)
    assert not again.refresh()
    assert _events(again) == 3  # the (tampered) cached rows are served as they are

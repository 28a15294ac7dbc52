"""A job's connections are cursors of one database whose views follow the segments."""

from __future__ import annotations

import gzip
import json

from tests.analysis import _kineto_synthetic as synthetic

from stepscope.store import open_job


def _write_rank(folder, rank: int) -> None:
    document = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": synthetic.events(),
    }
    (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(json.dumps(document).encode()))


def _ranks(con) -> list[int]:
    return [r for (r,) in con.sql("SELECT DISTINCT rank FROM events ORDER BY rank").fetchall()]


def test_connections_stay_independent_and_see_new_data_after_a_refresh(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    _write_rank(folder, 0)
    job = open_job(folder, cache_dir=tmp_path / "cache")
    first, second = job.connect(), job.connect()
    assert _ranks(first) == _ranks(second) == [0]
    first.close()  # closing one leaves the others usable
    assert _ranks(second) == [0]

    _write_rank(folder, 1)
    assert job.refresh()
    assert _ranks(job.connect()) == [0, 1]


def test_a_connection_of_its_own_keeps_its_settings_to_itself(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    _write_rank(folder, 0)
    job = open_job(folder, cache_dir=tmp_path / "cache")
    own = job.connect_own()
    own.execute("SET threads = 7")
    assert own.execute("SELECT current_setting('threads')").fetchone() == (7,)
    assert job.connect().execute("SELECT current_setting('threads')").fetchone() != (7,)
    assert _ranks(job.connect(into=own)) == [0]

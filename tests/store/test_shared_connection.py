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


def test_a_kept_connection_reads_a_segment_replaced_under_the_same_name(tmp_path):
    # The live rule engine keeps one connection with DuckDB's Parquet metadata cache on for the
    # whole job; a segment name can come back (generation 0 again once the old file is retired),
    # so a cached footer must not outlive its file.
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "segment-0.parquet"
    pq.write_table(pa.table({"value": [1, 2, 3]}), path)
    con = duckdb.connect()
    con.execute("SET parquet_metadata_cache = true")
    read = f"SELECT count(*), sum(value) FROM read_parquet('{path}')"
    assert con.execute(read).fetchone() == (3, 6)
    path.unlink()
    replacement = tmp_path / ".segment-0.parquet.tmp"
    pq.write_table(pa.table({"value": [10, 20, 30, 40, 50]}), replacement, row_group_size=2)
    replacement.rename(path)
    assert con.execute(read).fetchone() == (5, 150)

"""Files read ahead in threads: results in order, bounded, errors where they belong."""

from __future__ import annotations

import gzip
import json
import logging
import threading

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.store import open_job
from stepscope.store.read_ahead import ReadAhead


class _Reads:
    """A read function that records how many results are alive (read and not yet released)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.alive = 0
        self.most_alive = 0
        self.threads: set[str] = set()

    def __call__(self, key: int) -> int:
        with self.lock:
            self.alive += 1
            self.most_alive = max(self.most_alive, self.alive)
            self.threads.add(threading.current_thread().name)
        if key < 0:
            raise ValueError(f"bad key {key}")
        return key * 10

    def release(self) -> None:
        with self.lock:
            self.alive -= 1


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_results_come_in_order_with_at_most_depth_alive(depth):
    reads = _Reads()
    keys = list(range(9))
    with ReadAhead(keys, reads, depth) as ahead:
        results = []
        for key in keys:
            results.append(ahead.take(key))
            reads.release()  # the caller is done with this result before taking the next
    assert results == [k * 10 for k in keys]
    assert reads.most_alive <= depth
    if depth == 1:  # nothing runs ahead: every read happens on the caller's thread
        assert reads.threads == {threading.current_thread().name}


def test_an_error_is_raised_by_the_take_of_its_key_and_the_others_still_read():
    reads = _Reads()
    keys = [1, -2, 3]
    with ReadAhead(keys, reads, 2) as ahead:
        assert ahead.take(1) == 10
        with pytest.raises(ValueError, match="bad key -2"):
            ahead.take(-2)
        assert ahead.take(3) == 30


def test_a_key_that_was_not_announced_is_read_on_the_spot():
    reads = _Reads()
    with ReadAhead([1, 2], reads, 2) as ahead:
        assert ahead.take(7) == 70
        assert ahead.take(2) == 20
        assert ahead.take(1) == 10


def _rank_document(rank: int) -> bytes:
    document = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4},
        "traceEvents": synthetic.events(),
    }
    return json.dumps(document).encode()


def _events_per_rank(folder, cache_dir, caplog) -> dict[int, int]:
    """The events of each rank of the folder of traces, its warnings in ``caplog``."""
    job = open_job(folder, cache_dir=cache_dir)
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        job.refresh()
    con = job.connect()
    try:
        return dict(con.sql("SELECT rank, count(*) FROM events GROUP BY rank").fetchall())
    finally:
        con.close()


def test_a_folder_of_ranks_is_read_whole_beside_a_truncated_trace(tmp_path, caplog):
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1, 3):
        (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(_rank_document(rank)))
    document = _rank_document(2)
    (folder / "rank-2.json").write_bytes(document[: len(document) * 2 // 3])
    per_rank = len([e for e in synthetic.events() if e["ph"] in ("X", "i", "C")])

    counts = _events_per_rank(folder, tmp_path / "cache", caplog)
    assert {rank: counts[rank] for rank in (0, 1, 3)} == {0: per_rank, 1: per_rank, 3: per_rank}
    assert counts.get(2, 0) < per_rank  # what precedes the cut is kept, the rest is lost
    assert any("rank-2.json" in r.getMessage() for r in caplog.records)


def test_a_gzipped_trace_cut_short_is_read_not_passed_over(tmp_path, caplog):
    # A small .json.gz cut short (a job killed while writing it) ends before the 256 KB that
    # the trace sniffer reads: it was taken for "not a trace", left out of its folder without
    # a word and refused on its own, though the reader keeps every event before the cut.
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank-0.json.gz").write_bytes(gzip.compress(_rank_document(0)))
    compressed = gzip.compress(_rank_document(1))
    (folder / "rank-1.json.gz").write_bytes(compressed[: len(compressed) * 2 // 3])
    per_rank = len([e for e in synthetic.events() if e["ph"] in ("X", "i", "C")])

    counts = _events_per_rank(folder, tmp_path / "cache", caplog)
    assert counts[0] == per_rank
    assert 0 < counts.get(1, 0) < per_rank
    assert any("rank-1.json.gz" in r.getMessage() for r in caplog.records)
    single = open_job(folder / "rank-1.json.gz", cache_dir=tmp_path / "cache-1")
    assert single.kind == "kineto"

"""Interval algebra: the union of busy intervals, as islands and as disjoint covering pieces."""

from __future__ import annotations

import duckdb
import pytest

from stepscope.analysis._intervals import covered_pieces_sql, merged_intervals_sql

# Device 0: 0-10 holds 2-5 (nested), 8-12 overlaps its end, 12-15 touches that, 20-25 stands
# alone, and 30-30 is empty. Device 1: one interval 100-150.
_ROWS = [
    (0, 0.0, 10.0),
    (0, 2.0, 5.0),
    (0, 8.0, 12.0),
    (0, 12.0, 15.0),
    (0, 20.0, 25.0),
    (0, 30.0, 30.0),
    (1, 100.0, 150.0),
]
_SOURCE = (
    "SELECT device, start_us::DOUBLE AS start_us, end_us::DOUBLE AS end_us FROM (VALUES "
    + ", ".join(str(r) for r in _ROWS)
    + ") t(device, start_us, end_us)"
)


@pytest.fixture
def con():
    connection = duckdb.connect()
    yield connection
    connection.close()


def test_pieces_are_disjoint_and_cover_the_union(con):
    pieces = con.sql(
        covered_pieces_sql(_SOURCE, ("device",)) + " ORDER BY device, start_us"
    ).fetchall()
    # 0-10, then 8-12 adds 10-12, 12-15 adds all of itself, 2-5 adds nothing; the empty 30-30
    # stays as an empty piece, as it stays an empty island (the span still reaches it).
    assert pieces == [
        (0, 0.0, 10.0),
        (0, 10.0, 12.0),
        (0, 12.0, 15.0),
        (0, 20.0, 25.0),
        (0, 30.0, 30.0),
        (1, 100.0, 150.0),
    ]


def test_pieces_and_islands_measure_the_same_busy_time(con):
    lengths = {}
    for name, sql in (
        ("pieces", covered_pieces_sql(_SOURCE, ("device",))),
        ("islands", merged_intervals_sql(_SOURCE, ("device",))),
    ):
        lengths[name] = dict(
            con.sql(
                f"SELECT device, sum(end_us - start_us) FROM ({sql}) GROUP BY device"
            ).fetchall()
        )
    assert lengths["pieces"] == lengths["islands"] == {0: 20.0, 1: 50.0}


def test_pieces_without_keys_pool_everything(con):
    total = con.sql(
        f"SELECT sum(end_us - start_us) FROM ({covered_pieces_sql(_SOURCE, ())})"
    ).fetchall()
    assert total == [(70.0,)]

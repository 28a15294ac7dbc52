"""The hand-built job: tables in the store's schemas, defaults, views and replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA
from stepscope.testing import TableJob, connect, event_row, events_table, system_table


def test_columns_repeat_scalars_and_fill_missing_values() -> None:
    table = events_table(category="kernel", start_us=np.array([0.0, 10.0]), dur_us=5.0, step=3)
    assert table.schema == EVENT_SCHEMA
    assert table.to_pylist()[1] == {
        "source": "",
        "node": "algo-1",
        "rank": 0,
        "category": "kernel",
        "name": "",
        "ph": "X",
        "start_us": 10.0,
        "dur_us": 5.0,
        "pid": -1,
        "tid": -1,
        "step": 3,
        "device": -1,
        "stream": -1,
        "correlation": -1,
        "external_id": -1,
        "bytes": -1,
        "args": "",
    }


def test_rows_and_columns_build_the_same_table() -> None:
    rows = [
        {"timestamp_us": 5, "type": "cpu", "name": "cpu0", "dimension": "CPUUtilization", "value": 1.0},
        {"timestamp_us": 6, "type": "cpu", "name": "cpu0", "dimension": "CPUUtilization", "value": 2.0},
    ]  # fmt: skip
    by_columns = system_table(
        timestamp_us=[5, 6], type="cpu", name="cpu0", dimension="CPUUtilization", value=[1.0, 2.0]
    )
    assert by_columns.schema == SYSTEM_SCHEMA
    assert system_table(rows).equals(by_columns)


def test_mistakes_are_named() -> None:
    with pytest.raises(KeyError, match="strat_us"):
        event_row(strat_us=1.0)
    with pytest.raises(KeyError, match="duration"):
        events_table(start_us=[1.0], duration=[2.0])
    with pytest.raises(ValueError, match=r"\[2, 3\]"):
        events_table(start_us=[1.0, 2.0], dur_us=[1.0, 2.0, 3.0])
    with pytest.raises(KeyError, match="timestamp_us"):
        system_table(type="cpu", name="cpu0", value=[1.0])


def test_connect_without_tables_has_empty_views() -> None:
    con = connect()
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM system").fetchall() == [(0,)]


def test_a_job_replays_what_was_visible_at_a_time(tmp_path: Path) -> None:
    job = TableJob(
        tmp_path / "run-7",
        system=system_table(timestamp_us=[100, 200], type="gpu", name="gpu0", value=[1.0, 2.0]),
        events=[event_row(name="step", start_us=150.0, dur_us=10.0)],
    )
    job.add(events=events_table(name="late", start_us=[250.0]))
    assert (job.name, job.kind, job.metadata) == ("run-7", "stepscope", {})
    assert job.refresh() is True
    assert job.refresh() is False

    job.visible_until_us = 200
    assert job.refresh() is True
    con = job.connect()
    assert con.sql("SELECT value FROM system").fetchall() == [(1.0,)]
    assert con.sql("SELECT name FROM events").fetchall() == [("step",)]

    job.visible_until_us = None
    assert job.refresh() is True
    names = job.connect().sql("SELECT name FROM events ORDER BY start_us").fetchall()
    assert names == [("step",), ("late",)]
    assert job.refreshes == 4

"""Hand-built jobs held in memory as Arrow tables, for tests of analyses and rules.

A test that states exactly which samples and events a job holds can assert exact results, and
does not depend on how a job is stored on disk. :func:`events_table` and :func:`system_table`
build tables in the store's schemas (:data:`~stepscope.store.schema.EVENT_SCHEMA`,
:data:`~stepscope.store.schema.SYSTEM_SCHEMA`) from rows or from columns, filling every column
left out with its missing value; :func:`connect` opens a DuckDB connection with the ``events``
and ``system`` views analyses query; :class:`TableJob` is a job over such tables with the
interface rules and the UI use (``refresh``, ``connect``, ``path``, ``name``, ``kind``,
``metadata``), so a custom rule runs on it as on a real job::

    job = TableJob(tmp_path / "job")
    job.add(events=events_table(category="Step:ModeKeys.TRAIN", start_us=starts, dur_us=2e5))
    session = RuleSession(job, [MyRule()])
    session.advance(final=True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA

__all__ = ["TableJob", "connect", "event_row", "events_table", "system_table"]


def _missing(field: pa.Field) -> Any:
    """The schema's missing value of a column: ``""``, ``-1``, or ``0.0`` for times."""
    if pa.types.is_string(field.type):
        return ""
    return 0.0 if pa.types.is_floating(field.type) else -1


#: What an event column holds when a test leaves it out: the schema's missing values (``-1``,
#: ``""``, ``0.0`` for times), a span (``ph="X"``) of rank 0 on node ``algo-1``.
EVENT_DEFAULTS: dict[str, Any] = {
    **{field.name: _missing(field) for field in EVENT_SCHEMA},
    "node": "algo-1",
    "rank": 0,
    "ph": "X",
}

#: What a system column holds when a test leaves it out (node ``algo-1``, no dimension).
SYSTEM_DEFAULTS: dict[str, Any] = {"node": "algo-1", "dimension": ""}

#: The job's data rows are all visible until a time is set; this bound is later than any.
_ALL_US = 2**62

Rows = Iterable[Mapping[str, Any]]


def event_row(**fields: Any) -> dict[str, Any]:
    """One event as a dict with every column of the event schema; unknown names are an error.

    :raises KeyError: a field that is not an event column (a typo would otherwise vanish).
    """
    unknown = set(fields) - set(EVENT_DEFAULTS)
    if unknown:
        raise KeyError(f"event_row fields must be event columns, got {sorted(unknown)!r}.")
    return {**EVENT_DEFAULTS, **fields}


def _table(
    schema: pa.Schema, defaults: Mapping[str, Any], rows: Rows | None, columns: dict[str, Any]
) -> pa.Table:
    if rows is not None:
        if columns:
            raise TypeError("give rows or columns, not both.")
        return pa.Table.from_pylist([{**defaults, **row} for row in rows], schema=schema)
    lengths = {len(v) for v in columns.values() if not isinstance(v, str) and np.ndim(v) == 1}
    if len(lengths) > 1:
        raise ValueError(f"columns must have one length, got lengths {sorted(lengths)}.")
    n = lengths.pop() if lengths else 1
    data = {}
    for field in schema:
        value = columns.pop(field.name, defaults.get(field.name))
        if value is None:
            raise KeyError(f"column {field.name!r} has no default; give it.")
        if isinstance(value, np.ndarray | np.generic):
            value = value.tolist()
        if isinstance(value, str) or np.ndim(value) == 0:
            value = [value] * n
        data[field.name] = pa.array(value, type=field.type)
    if columns:
        raise KeyError(f"columns must be {schema.names}, got {sorted(columns)!r}.")
    return pa.table(data, schema=schema)


def events_table(rows: Rows | None = None, /, **columns: Any) -> pa.Table:
    """Events in the event schema, from row dicts or from columns, missing columns defaulted.

    Columns may be sequences (all of one length) or scalars, which are repeated on every row:
    ``events_table(category="kernel", start_us=[0.0, 10.0], dur_us=5.0)`` is two kernels.
    """
    return _table(EVENT_SCHEMA, EVENT_DEFAULTS, rows, columns)


def system_table(rows: Rows | None = None, /, **columns: Any) -> pa.Table:
    """System samples in the system schema, from row dicts or columns, as :func:`events_table`.

    ``timestamp_us``, ``type``, ``name`` and ``value`` have no default.
    """
    return _table(SYSTEM_SCHEMA, SYSTEM_DEFAULTS, rows, columns)


def connect(
    events: pa.Table | None = None,
    system: pa.Table | None = None,
    *,
    visible_until_us: float | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose ``events`` and ``system`` views read the given tables.

    A table left out is empty. With ``visible_until_us`` the views hold only the rows that
    start before it, as a job being written shows only what was written so far.
    """
    until = _ALL_US if visible_until_us is None else visible_until_us
    con = duckdb.connect()
    con.register("events_table", EVENT_SCHEMA.empty_table() if events is None else events)
    con.register("system_table", SYSTEM_SCHEMA.empty_table() if system is None else system)
    con.execute(f"CREATE VIEW events AS SELECT * FROM events_table WHERE start_us < {until}")
    con.execute(f"CREATE VIEW system AS SELECT * FROM system_table WHERE timestamp_us < {until}")
    return con


def _as_table(data: pa.Table | Rows, build: Any) -> pa.Table:
    return data if isinstance(data, pa.Table) else build(data)


class TableJob:
    """A job over in-memory tables with the interface rules and the UI use on a real job.

    :param path: the job's folder (never read; ``name`` is its last part).
    :param system: system samples, a table or rows for :func:`system_table`.
    :param events: events, a table or rows for :func:`events_table`.
    :param metadata: what the job's ``metadata`` says (job.json, nodes, ranks ...).

    Set :attr:`visible_until_us` to replay the job as it is being written: only data before that
    time is visible, and :meth:`refresh` says when more became visible.
    """

    def __init__(
        self,
        path: Path,
        system: pa.Table | Rows = (),
        events: pa.Table | Rows = (),
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.kind = "stepscope"
        self.metadata: dict[str, Any] = metadata or {}
        #: only data before this time is visible (None: all of it)
        self.visible_until_us: float | None = None
        #: how many times :meth:`refresh` was called
        self.refreshes = 0
        self._system: list[pa.Table] = []
        self._events: list[pa.Table] = []
        self._refreshed_until: float | None = -1.0
        self.add(system=system, events=events)

    def add(self, *, system: pa.Table | Rows = (), events: pa.Table | Rows = ()) -> None:
        """Append system samples and events (tables, or rows with missing columns defaulted)."""
        system_part = _as_table(system, system_table)
        events_part = _as_table(events, events_table)
        if system_part.num_rows:
            self._system.append(system_part)
        if events_part.num_rows:
            self._events.append(events_part)

    def refresh(self) -> bool:
        """True when more data became visible since the last call, as a real job's refresh."""
        self.refreshes += 1
        changed = self.visible_until_us != self._refreshed_until
        self._refreshed_until = self.visible_until_us
        return changed

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A connection with the ``events`` and ``system`` views over what is visible."""
        return connect(
            pa.concat_tables(self._events) if self._events else None,
            pa.concat_tables(self._system) if self._system else None,
            visible_until_us=self.visible_until_us,
        )

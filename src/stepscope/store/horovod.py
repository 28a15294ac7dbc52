"""Reader of Horovod timelines (the ``HOROVOD_TIMELINE`` file Horovod writes itself).

Horovod writes a Chrome trace-event array, one event per line, without closing it while the job
runs: a ``process_name`` per tensor (``Adam_Allreduce/HorovodAllreduce_...``), ``B``/``E`` pairs
for negotiation and operation phases (``NEGOTIATE_ALLREDUCE``, ``ALLREDUCE``), ``X`` spans for
per-rank readiness and ``i`` instants (``CYCLE_START``). Its ``ts`` counts microseconds on
Horovod's own clock (the machine's monotonic clock), not from the epoch, so the caller passes the
start time when it knows it, or else when the file was last written, which places the events
approximately.

SageMaker Debugger re-chunks this file into ``*_horovod_timeline.json`` pevents files with a start
time; those are read by :func:`stepscope.store.sagemaker.read_pevents_file` with the same pairing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc

from stepscope.store.sagemaker import EventColumns, TraceEventConverter, read_event_lines

__all__ = ["read_horovod_timeline"]

logger = logging.getLogger(__name__)


def read_horovod_timeline(
    stream: IO[bytes],
    *,
    path: str,
    node: str = "",
    rank: int = -1,
    start_us: float = 0.0,
    ends_at_us: float | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream a Horovod timeline as EVENT_SCHEMA batches with ``source="horovod"``.

    ``B``/``E`` pairs of one tensor become one ``X`` span named by the ``B`` event; an ``E``
    without its ``B`` (cut off by a rotation) and a ``B`` never closed are left out.

    :param stream: the timeline, opened in binary mode; a missing closing ``]`` is fine.
    :param path: the file's name for messages.
    :param node: the node that wrote it.
    :param rank: the Horovod rank (the chief writes the timeline, usually 0); -1 when unknown.
    :param start_us: µs since the epoch of Horovod's time zero; 0 keeps Horovod's relative times.
    :param ends_at_us: when Horovod's time zero is not known, the time the last event ended (µs
        since the epoch; the file's modification time, as Horovod writes while it runs): the
        events are moved so, with a warning that this is approximate. The file's rows are then
        held until its end.
    """
    converter = TraceEventConverter(EventColumns("horovod", node, rank), start_us=start_us)
    batches = read_event_lines(stream, converter, path=path)
    if ends_at_us is None:
        yield from batches
        return
    held = [batch for batch in batches if batch.num_rows]
    if not held:
        return
    last_us = max(pc.max(pc.add(b.column("start_us"), b.column("dur_us"))).as_py() for b in held)
    shift_us = ends_at_us - last_us
    logger.warning(
        "%s: a Horovod timeline counts time on Horovod's own clock; its events are placed so "
        "that the last one ends at the file's modification time, which is approximate.",
        path,
    )
    index = held[0].schema.get_field_index("start_us")
    for batch in held:
        moved = pc.add(batch.column(index), shift_us)
        yield batch.set_column(index, batch.schema.field(index), moved)

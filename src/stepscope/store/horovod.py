"""Reader of Horovod timelines (the ``HOROVOD_TIMELINE`` file Horovod writes itself).

Horovod writes a Chrome trace-event array, one event per line, without closing it while the job
runs: a ``process_name`` per tensor (``Adam_Allreduce/HorovodAllreduce_...``), ``B``/``E`` pairs
for negotiation and operation phases (``NEGOTIATE_ALLREDUCE``, ``ALLREDUCE``), ``X`` spans for
per-rank readiness and ``i`` instants (``CYCLE_START``). Its ``ts`` counts microseconds from
Horovod's own start, not from the epoch, so the caller passes the start time when it knows it.

SageMaker Debugger re-chunks this file into ``*_horovod_timeline.json`` pevents files with a start
time; those are read by :func:`stepscope.store.sagemaker.read_pevents_file` with the same pairing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

import pyarrow as pa

from stepscope.store.sagemaker import EventColumns, TraceEventConverter, read_event_lines

__all__ = ["read_horovod_timeline"]


def read_horovod_timeline(
    stream: IO[bytes], *, path: str, node: str = "", rank: int = -1, start_us: float = 0.0
) -> Iterator[pa.RecordBatch]:
    """Stream a Horovod timeline as EVENT_SCHEMA batches with ``source="horovod"``.

    ``B``/``E`` pairs of one tensor become one ``X`` span named by the ``B`` event; an ``E``
    without its ``B`` (cut off by a rotation) and a ``B`` never closed are left out.

    :param stream: the timeline, opened in binary mode; a missing closing ``]`` is fine.
    :param path: the file's name for messages.
    :param node: the node that wrote it.
    :param rank: the Horovod rank (the chief writes the timeline, usually 0); -1 when unknown.
    :param start_us: µs since the epoch of Horovod's time zero; 0 keeps Horovod's relative times.
    """
    converter = TraceEventConverter(EventColumns("horovod", node, rank), start_us=start_us)
    yield from read_event_lines(stream, converter, path=path)

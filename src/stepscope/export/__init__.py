"""Export a job (or any trace stepscope reads) as one trace for Perfetto UI or chrome://tracing.

Unlike the naive Kineto JSON, which loses annotations in Perfetto because its slices overlap,
every track of an export nests strictly; system metrics come along as counter tracks and every
launch is tied to its GPU activity by a flow arrow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Literal

from stepscope._atomic import replacing
from stepscope.errors import ConfigError
from stepscope.export.chrome import write_chrome_trace
from stepscope.export.perfetto import write_perfetto_trace
from stepscope.export.summary import ExportSummary
from stepscope.export.window import parse_range, resolve_window
from stepscope.store.filesystem import local_output_path

__all__ = ["EXPORT_FORMATS", "ExportSummary", "export_trace", "format_for", "parse_range"]

ExportFormat = Literal["perfetto", "chrome"]

#: format name -> (writer, default file suffix)
EXPORT_FORMATS = {
    "perfetto": (write_perfetto_trace, ".perfetto-trace"),
    "chrome": (write_chrome_trace, ".trace.json.gz"),
}


def format_for(output: str | os.PathLike[str] | None) -> ExportFormat:
    """The format a file of this name holds: ``chrome`` for ``*.json`` and ``*.json.gz`` (what
    chrome://tracing and Perfetto UI open as JSON), else ``perfetto``."""
    name = Path(output).name.lower() if output is not None else ""
    return "chrome" if name.endswith((".json", ".json.gz")) else "perfetto"


def export_trace(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str] | BinaryIO | None = None,
    *,
    format: ExportFormat | None = None,
    steps: tuple[float | None, float | None] | None = None,
    time_s: tuple[float | None, float | None] | None = None,
) -> ExportSummary:
    """Export a job, SageMaker output folder or PyTorch profiler trace(s) as one trace file.

    :param source: anything :func:`stepscope.store.open_job` reads.
    :param output: the file to write (never the trace being exported); default
        ``<job name><suffix>`` in the current folder. It is replaced once the whole trace is
        written: an export that fails leaves the file as it was. Or a binary stream
        (``sys.stdout.buffer``) that gets the trace as it is written, never compressed; the
        summary's ``path`` is then ``None``.
    :param format: ``perfetto`` (protobuf TrackEvent) or ``chrome`` (trace-event JSON); default
        :func:`format_for` the output's name (``perfetto`` for a stream).
    :param steps: only steps ``A <= step < B`` (either bound may be ``None``).
    :param time_s: only seconds ``[A, B)`` from the job's first record; not with ``steps``.
    """
    from stepscope.store import open_job

    if output is None or isinstance(output, (str, os.PathLike)):
        name, stream = output, None
    else:
        name, stream = None, output
    if format is None:
        format = format_for(name)
    if format not in EXPORT_FORMATS:
        raise ConfigError("format", format, f"one of {', '.join(EXPORT_FORMATS)}")
    writer, suffix = EXPORT_FORMATS[format]
    target = local_output_path("output", name) if name is not None else None
    job = open_job(source)
    job.refresh()
    con = job.connect()
    window = resolve_window(con, steps=steps, time_s=time_s)
    if stream is not None:
        return writer(con, stream, window)
    path = target if target is not None else Path(f"{job.name}{suffix}")
    if isinstance(job.path, Path) and path.exists() and path.samefile(job.path):
        raise ConfigError(
            "output",
            str(path),
            "a file other than the trace it exports",
            "Writing there would replace the recorded trace with its export.",
        )
    # written beside the output and renamed over it: a full disk or a kill leaves the previous
    # export, not half a trace; the name ends as the output's (it may choose the compression)
    with replacing(path, suffix=f".partial-{path.name}", make_folder=False) as partial:
        summary = writer(con, partial, window)
    summary.path = path
    return summary

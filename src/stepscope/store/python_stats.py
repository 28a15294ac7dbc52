"""The python-stats folders of the profiler output: their names parsed into records.

The Python profiler (cProfile or pyinstrument) writes one folder per profiled interval::

    framework/<framework>/<cprofile|pyinstrument>/<node_id>/
        <sMode>-<sStep>-<sPhase>-<sUs>_<eMode>-<eStep>-<ePhase>-<eUs>/python_stats[.json|.html]

Modes are ``train|eval|predict|global|prestepzero|posthookclose``, phases
``start|stepstart|forwardpassend|stepend|end``, the step is ``*`` before step zero and after the
hook closed, and times are float microseconds since the epoch. cProfile writes a ``pstats``
marshal dump ``python_stats``; pyinstrument writes ``python_stats.json`` (its JSONRenderer
output) and ``python_stats.html``.

This module only reads names; the files themselves are read by the analyses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from stepscope.store import layout
from stepscope.store.layout import CPROFILE_STATS_FILE, PYINSTRUMENT_STATS_FILES

__all__ = [
    "PythonProfileModes",
    "PythonStatsRecord",
    "StepPhase",
    "list_python_stats",
    "parse_python_stats_folder",
    "python_stats_files",
]

logger = logging.getLogger(__name__)


class PythonProfileModes(str, Enum):
    """The training mode written at each end of a python-stats folder name."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "predict"
    GLOBAL = "global"
    PRE_STEP_ZERO = "prestepzero"
    POST_HOOK_CLOSE = "posthookclose"


class StepPhase(str, Enum):
    """Where in a step profiling started or stopped (in the order they happen in a step)."""

    START = "start"
    STEP_START = "stepstart"
    FORWARD_PASS_END = "forwardpassend"
    STEP_END = "stepend"
    END = "end"


#: The stats files each profiler writes, main file first.
_STATS_FILES = {"cprofile": (CPROFILE_STATS_FILE,), "pyinstrument": PYINSTRUMENT_STATS_FILES[:1]}
_HTML_FILE = PYINSTRUMENT_STATS_FILES[1]


@dataclass(frozen=True)
class PythonStatsRecord:
    """One profiled interval: where it starts and ends, and where its stats file is.

    :param node_id: the writer's node id, e.g. ``"0-algo-1"``.
    :param profiler: ``"cprofile"`` or ``"pyinstrument"``.
    :param framework: the folder above the profiler folder, e.g. ``"pytorch"``.
    :param start_step: ``-1`` when the folder name says ``*`` (before step zero).
    :param end_step: ``-1`` when the folder name says ``*`` (after the hook closed); the analyses
        treat it as "after every step".
    :param start_time_us: profiling start, µs since the epoch.
    :param end_time_us: profiling end, µs since the epoch.
    :param path: the main stats file (``python_stats`` or ``python_stats.json``), as a string so
        that remote paths keep their scheme.
    :param html_path: pyinstrument's HTML page beside it, ``""`` when absent.
    """

    node_id: str
    profiler: str
    framework: str
    start_mode: PythonProfileModes
    start_step: int
    start_phase: StepPhase
    start_time_us: float
    end_mode: PythonProfileModes
    end_step: int
    end_phase: StepPhase
    end_time_us: float
    path: str
    html_path: str = ""

    @property
    def folder(self) -> str:
        """The folder name this record was parsed from."""
        return os.path.basename(os.path.dirname(self.path))

    def to_dict(self) -> dict[str, Any]:
        """The record as plain values (modes and phases as their folder strings)."""
        return {
            "node_id": self.node_id,
            "profiler": self.profiler,
            "framework": self.framework,
            "start_mode": self.start_mode.value,
            "start_step": self.start_step,
            "start_phase": self.start_phase.value,
            "start_time_us": self.start_time_us,
            "end_mode": self.end_mode.value,
            "end_step": self.end_step,
            "end_phase": self.end_phase.value,
            "end_time_us": self.end_time_us,
            "path": self.path,
            "html_path": self.html_path,
        }


def parse_python_stats_folder(
    folder: str, *, node_id: str, profiler: str, framework: str, path: str, html_path: str = ""
) -> PythonStatsRecord | None:
    """Parse one ``<sMode>-<sStep>-<sPhase>-<sUs>_<eMode>-...`` folder name, None if it is not one."""
    bounds = layout.parse_python_stats_folder(folder)
    if bounds is None:
        return None
    start, end = bounds
    return PythonStatsRecord(
        node_id=node_id,
        profiler=profiler,
        framework=framework,
        start_mode=PythonProfileModes(start.mode),
        start_step=-1 if start.step is None else start.step,
        start_phase=StepPhase(start.phase),
        start_time_us=start.time_us,
        end_mode=PythonProfileModes(end.mode),
        end_step=-1 if end.step is None else end.step,
        end_phase=StepPhase(end.phase),
        end_time_us=end.time_us,
        path=path,
        html_path=html_path,
    )


def _start_dir(root: str, fs: Any) -> str:
    """Descend into ``profiler-output/framework`` when given a job or profiler-output folder."""
    for child in ("profiler-output", "framework"):
        candidate = f"{root.rstrip('/')}/{child}"
        if fs.isdir(candidate) if fs is not None else os.path.isdir(candidate):
            root = candidate
    return root


def python_stats_files(root: str | os.PathLike[str], *, fs: Any = None) -> dict[str, int | None]:
    """The files of the folder :func:`list_python_stats` searches under ``root``, in one
    listing, each with its size in bytes as a remote listing gives it (None on the local disk).

    Copying remote profiles needs both their names and their sizes (to tell a whole copy from
    one cut off): ``list_python_stats(root, fs=fs, files=...)`` parses these without listing the
    store a second time.

    :param root: as :func:`list_python_stats`'s.
    :param fs: as :func:`list_python_stats`'s.
    """
    start = _start_dir(os.fspath(root), fs)
    if fs is not None:
        listing = fs.find(start, detail=True)
        return {str(path): int(info.get("size") or 0) for path, info in listing.items()}
    found: dict[str, int | None] = {}
    for dirpath, _dirnames, filenames in os.walk(start):
        found.update((os.path.join(dirpath, name), None) for name in filenames)
    return found


def list_python_stats(
    root: str | os.PathLike[str], *, fs: Any = None, files: Iterable[str] | None = None
) -> list[PythonStatsRecord]:
    """Every python-stats folder under ``root``, parsed, sorted by node and start time.

    :param root: a job folder, its ``profiler-output`` folder (SageMaker's ``LocalPath``), a
        ``framework`` folder, or a ``<framework>/<profiler>`` folder such as SageMaker's
        ``local_profile_dir``. Folders whose names are not in the current layout (for example the
        2020 ``<start>_<end>_<node>_<step>`` naming) are skipped, with one warning saying how many.
    :param fs: an fsspec filesystem for remote roots (e.g. ``s3fs.S3FileSystem()``); None reads
        the local disk.
    :param files: the :func:`python_stats_files` of ``root`` when the caller holds them; None
        lists them.
    """
    records: list[PythonStatsRecord] = []
    skipped = 0
    by_folder: dict[str, set[str]] = {}
    for file_path in files if files is not None else python_stats_files(root, fs=fs):
        parent, name = file_path.rsplit("/", 1) if fs is not None else os.path.split(file_path)
        if name.startswith("python_stats"):
            by_folder.setdefault(parent, set()).add(name)
    for folder_path, names in by_folder.items():
        parts = Path(folder_path).parts
        if len(parts) < 4:
            continue
        framework, profiler, node_id, folder = parts[-4], parts[-3].lower(), parts[-2], parts[-1]
        main_names = _STATS_FILES.get(profiler)
        main = next((n for n in main_names or () if n in names), None)
        if main is None:
            skipped += 1
            continue
        html = f"{folder_path}/{_HTML_FILE}" if _HTML_FILE in names else ""
        record = parse_python_stats_folder(
            folder,
            node_id=node_id,
            profiler=profiler,
            framework=framework,
            path=f"{folder_path}/{main}",
            html_path=html,
        )
        if record is None:
            skipped += 1
            continue
        records.append(record)
    if skipped:  # a warning: a listing that finds nothing should say why
        logger.warning(
            "Skipped %d python-stats folder(s) under %s whose names are not "
            "<mode>-<step>-<phase>-<us>_<mode>-<step>-<phase>-<us> in a <profiler>/<node_id> folder.",
            skipped,
            os.fspath(root),
        )
    records.sort(key=lambda r: (r.node_id, r.start_time_us, r.end_time_us))
    return records

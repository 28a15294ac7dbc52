"""Queries over the Python profiles of a job (cProfile and pyinstrument), SageMaker's API.

``cProfileAnalysis`` and ``PyinstrumentAnalysis`` keep smdebug's method names
(``fetch_profile_stats_by_step``, ``fetch_pre_step_zero_profile_stats``, ...) and fix what made
them awkward:

* every query returns a result object; an empty selection returns an *empty* result and logs why
  (smdebug printed "No stats were found" and returned None);
* results have :meth:`top_functions`, a real table (``function``, ``file``, ``line``,
  ``prim_calls``, ``total_calls``, ``total_time_s``, ``cumulative_time_s``, ``per_call_s``),
  where smdebug returned one column of repr strings;
* pyinstrument profiles are read as frame trees, so they get the same table (pyinstrument samples,
  it does not count calls: the call columns are missing values there);
* ``fetch_profile_stats_by_training_phase`` groups the folders present instead of trying all 36
  mode pairs and printing a line for each empty one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pstats
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope._atomic import replacing
from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.config.validation import check_enum, check_int, check_unix_time, plain_number
from stepscope.errors import ConfigError, JobNotFoundError
from stepscope.store.filesystem import RemoteFiles
from stepscope.store.python_stats import (
    PythonProfileModes,
    PythonStatsRecord,
    StepPhase,
    list_python_stats,
    python_stats_files,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Metrics",
    "PyinstrumentAnalysis",
    "PyinstrumentStats",
    "PyinstrumentStepStats",
    "cProfileAnalysis",
    "cProfileStats",
]

logger = logging.getLogger(__name__)

#: Columns of every :meth:`top_functions` table.
TOP_COLUMNS = [
    "function",
    "file",
    "line",
    "prim_calls",
    "total_calls",
    "total_time_s",
    "cumulative_time_s",
    "per_call_s",
]


class Metrics(str, Enum):
    """What to rank functions by (SageMaker's names; values are the ``pstats`` sort keys)."""

    TOTAL_TIME = "tottime"
    CUMULATIVE_TIME = "cumtime"
    PRIMITIVE_CALLS = "pcalls"
    TOTAL_CALLS = "ncalls"


#: The columns pyinstrument cannot fill: it samples the stack instead of counting calls.
_CALL_COLUMNS = ("prim_calls", "total_calls", "per_call_s")

_SORT_COLUMN = {
    Metrics.TOTAL_TIME: "total_time_s",
    Metrics.CUMULATIVE_TIME: "cumulative_time_s",
    Metrics.PRIMITIVE_CALLS: "prim_calls",
    Metrics.TOTAL_CALLS: "total_calls",
}


def _sort_column(by: Metrics | str) -> str:
    if isinstance(by, Metrics):
        return _SORT_COLUMN[by]
    if by in TOP_COLUMNS:
        return by
    try:
        return _SORT_COLUMN[Metrics(by)]
    except ValueError:
        allowed = ", ".join([*(m.name for m in Metrics), *TOP_COLUMNS[3:]])
        raise ConfigError("top_functions.by", by, f"one of {allowed}") from None


def _top(table: pd.DataFrame, n: int, by: Metrics | str) -> pd.DataFrame:
    # pandas' head(-1) is every row but the last: a wrong n would pass unnoticed.
    n = check_int("top_functions.n", plain_number(n), minimum=1)
    column = _sort_column(by)
    ranked = table.sort_values(column, ascending=False, kind="stable", na_position="last")
    return ranked.head(n).reset_index(drop=True)


@dataclass
class cProfileStats:
    """cProfile statistics of the selected intervals, merged.

    :ivar ps: the merged :class:`pstats.Stats` (empty when nothing matched).
    :ivar records: the python-stats folders that were merged.
    """

    ps: pstats.Stats
    records: list[PythonStatsRecord] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when no profile matched the query."""
        return not self.records

    def get_function_stats(self) -> pd.DataFrame:
        """Every profiled function, one row each, with the :data:`TOP_COLUMNS` columns."""
        import pandas as pd

        rows = []
        for (file, line, function), (prim, total, tottime, cumtime, _callers) in getattr(
            self.ps, "stats", {}
        ).items():
            rows.append(
                (
                    function,
                    file,
                    line,
                    prim,
                    total,
                    tottime,
                    cumtime,
                    cumtime / prim if prim else 0.0,
                )
            )
        return pd.DataFrame(rows, columns=TOP_COLUMNS)

    def top_functions(
        self, n: int = 20, by: Metrics | str = Metrics.CUMULATIVE_TIME
    ) -> pd.DataFrame:
        """The ``n`` functions with the largest ``by`` (a :class:`Metrics` or a column name)."""
        return _top(self.get_function_stats(), n, by)

    def print_top_n_functions(
        self, by: Metrics | str = Metrics.TOTAL_TIME, n: int = 10
    ) -> pd.DataFrame:
        """Log the top ``n`` functions as a table and return it (SageMaker printed pstats text)."""
        top = self.top_functions(n, by)
        logger.info("Top %d functions by %s:\n%s", n, _sort_column(by), top.to_string(index=False))
        return top


@dataclass
class PyinstrumentStepStats:
    """One pyinstrument profile: its HTML page, its JSON frame tree and its folder record."""

    html_file_path: str
    json_stats: dict[str, Any]
    record: PythonStatsRecord | None = None


#: The function name pyinstrument gives the pseudo-frame holding its parent's own time.
_SELF_TIME_FRAME = "[self]"


def _frame_rows(root: dict[str, Any]) -> Iterator[tuple[tuple[str, str, int], float, float, bool]]:
    """Yield (key, self time, inclusive time, first on its stack) for every frame of a tree.

    A ``[self]`` child is its parent's own time (pyinstrument's way of showing it beside the
    calls), not a function: counted as one, it summed every function's own time into one row.
    """
    stack: list[tuple[dict[str, Any], frozenset[tuple[str, str, int]]]] = [(root, frozenset())]
    while stack:
        frame, ancestors = stack.pop()
        key = (
            str(frame.get("function", "")),
            str(frame.get("file_path", "")),
            int(frame.get("line_no") or 0),
        )
        children = [c for c in frame.get("children") or [] if c.get("function") != _SELF_TIME_FRAME]
        time_s = float(frame.get("time", 0.0))
        self_s = max(time_s - sum(float(c.get("time", 0.0)) for c in children), 0.0)
        # A recursive function's inclusive time counts once per stack, at its outermost frame.
        yield key, self_s, time_s, key not in ancestors
        inner = ancestors | {key}
        stack.extend((child, inner) for child in children)


@dataclass
class PyinstrumentStats(Sequence[PyinstrumentStepStats]):
    """The pyinstrument profiles of the selected intervals, one per interval.

    It is a sequence of :class:`PyinstrumentStepStats` (what SageMaker returned as a list) and
    adds :meth:`top_functions` over all of them.
    """

    steps: list[PyinstrumentStepStats] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when no profile matched the query."""
        return not self.steps

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: Any) -> Any:
        return self.steps[index]

    def __iter__(self) -> Iterator[PyinstrumentStepStats]:
        return iter(self.steps)

    def get_function_stats(self) -> pd.DataFrame:
        """Self and inclusive time per function over all selected profiles (:data:`TOP_COLUMNS`).

        Pyinstrument samples the stack instead of counting calls, so ``prim_calls``,
        ``total_calls`` and ``per_call_s`` are missing values.
        """
        import pandas as pd

        totals: dict[tuple[str, str, int], list[float]] = {}
        for step in self.steps:
            root = step.json_stats.get("root_frame")
            if not root:
                continue
            for key, self_s, time_s, outermost in _frame_rows(root):
                acc = totals.setdefault(key, [0.0, 0.0])
                acc[0] += self_s
                if outermost:
                    acc[1] += time_s
        rows = [
            (f, file, line, math.nan, math.nan, t, c, math.nan)
            for (f, file, line), (t, c) in totals.items()
        ]
        return pd.DataFrame(rows, columns=TOP_COLUMNS)

    def top_functions(
        self, n: int = 20, by: Metrics | str = Metrics.CUMULATIVE_TIME
    ) -> pd.DataFrame:
        """The ``n`` functions with the largest ``by`` (time columns only: calls are not counted).

        :raises ConfigError: ``by`` is a call count, which is missing for every function (the
            order would be the table's own, not a ranking).
        """
        if _sort_column(by) in _CALL_COLUMNS:
            raise ConfigError(
                "top_functions.by",
                by,
                "a time: Metrics.TOTAL_TIME, Metrics.CUMULATIVE_TIME, total_time_s or "
                "cumulative_time_s",
                "pyinstrument samples the stack; it does not count calls.",
            )
        return _top(self.get_function_stats(), n, by)


class _PythonProfileAnalysis:
    """The queries both profilers share; subclasses say which folders are theirs and merge them."""

    profiler = ""

    def __init__(
        self,
        local_profile_dir: Any = None,
        s3_path: str | None = None,
        *,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        """
        :param local_profile_dir: a job folder, its ``profiler-output`` folder, the
            ``framework/<framework>/<profiler>`` folder SageMaker's version took, a ``JobData``,
            or a :class:`~stepscope.analysis.PandasFrame` of one of them (its job's profiles);
            an ``s3://`` location is read as ``s3_path``. With ``s3_path`` it is
            where the stats are downloaded to (default: a new temporary folder).
        :param s3_path: an ``s3://`` job or profiler output (needs ``pip install
            'stepscope[s3]'``; endpoint and credentials come from the usual ``AWS_*`` variables).
            The stats files are copied once into ``local_profile_dir``; a refresh copies only
            new ones, and again a copy whose size is not the remote file's (a download cut
            off). Nothing there raises ``JobNotFoundError``, refused credentials or an endpoint
            out of reach ``StorageAccessError``, as :func:`~stepscope.store.open_job`.
        :param storage_options: fsspec options for ``s3_path``, as
            :func:`~stepscope.store.open_job` takes them (an S3-compatible store's endpoint);
            a remote ``JobData`` brings those it was opened with.
        """
        if isinstance(local_profile_dir, PandasFrame):
            local_profile_dir = local_profile_dir.path  # what it reads: a path or a JobData
        job_path = getattr(local_profile_dir, "path", None)
        if job_path is not None and hasattr(local_profile_dir, "python_stats"):
            # A JobData: read where it reads, as it reads.
            storage_options = local_profile_dir.storage_options or storage_options
            local_profile_dir, s3_path = (
                (None, job_path) if "://" in str(job_path) else (job_path, s3_path)
            )
        elif s3_path is None and "://" in str(local_profile_dir or ""):
            # A remote job given as the job, as PandasFrame takes it: no local folder is named.
            local_profile_dir, s3_path = None, str(local_profile_dir)
        if local_profile_dir is None and s3_path is None:
            raise ConfigError(
                f"{type(self).__name__}.local_profile_dir",
                None,
                "a job folder, a profiler-output folder or a python-stats folder",
                "Pass local_profile_dir=... or s3_path='s3://...'.",
            )
        if s3_path is None and not isinstance(local_profile_dir, (str, os.PathLike)):
            raise ConfigError(
                f"{type(self).__name__}.local_profile_dir",
                local_profile_dir,
                "a job folder, a profiler-output folder, a python-stats folder, a JobData, or "
                "a PandasFrame of one of them",
            )
        if s3_path is None and not os.path.exists(local_profile_dir):
            # Otherwise a mistyped path reads as a job that has no profiles yet.
            raise JobNotFoundError(
                str(local_profile_dir),
                f"{type(self).__name__} reads a job folder, a profiler-output folder or a "
                "python-stats folder.",
            )
        self.local_profile_dir = local_profile_dir
        self.s3_path = s3_path
        self.storage_options = storage_options
        self.python_profile_stats: list[PythonStatsRecord] = []
        self._other_profilers: list[str] = []
        self._refresh_python_profile_stats(True)

    # -- loading ---------------------------------------------------------------------------

    def _download(self, s3_path: str) -> list[PythonStatsRecord]:
        """List the remote profiles and copy the new ones of this profiler to the local folder;
        those of the other profiler are listed as they are, not copied.

        :raises JobNotFoundError: nothing is at ``s3_path`` (a mistyped path would otherwise
            read as a job without profiles).
        :raises StorageAccessError: the store refused the requests or could not be reached.
        """
        files = RemoteFiles(s3_path, self.storage_options)
        if not files.exists():
            raise JobNotFoundError(s3_path, files.missing_detail())
        if self.local_profile_dir is None:
            self.local_profile_dir = tempfile.mkdtemp(prefix="stepscope-python-stats-")
        local_root = Path(self.local_profile_dir)
        remote_root = files.fsspec_root
        with files.requests():
            sizes = python_stats_files(remote_root, fs=files.fs)
        found: list[PythonStatsRecord] = []
        for record in list_python_stats(remote_root, fs=files.fs, files=sizes):
            if record.profiler != self.profiler:
                found.append(record)
                continue
            target = local_root / os.path.relpath(record.path, remote_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_once(files, record.path, target, sizes.get(record.path))
            html = ""
            if record.html_path:
                html_target = target.parent / os.path.basename(record.html_path)
                _copy_once(files, record.html_path, html_target, sizes.get(record.html_path))
                html = str(html_target)
            found.append(_with_paths(record, str(target), html))
        return found

    def _refresh_python_profile_stats(self, refresh_stats: bool) -> None:
        if not refresh_stats:
            return
        if self.s3_path is not None:
            records = self._download(self.s3_path)
        else:
            assert self.local_profile_dir is not None
            records = list_python_stats(self.local_profile_dir)
        self.python_profile_stats = [r for r in records if r.profiler == self.profiler]
        self._other_profilers = sorted({r.profiler for r in records} - {self.profiler})
        logger.debug("Found %d %s profiles.", len(self.python_profile_stats), self.profiler)

    def _by_node(self, node_id: str) -> list[PythonStatsRecord]:
        if not self.python_profile_stats:
            return []
        if node_id == "any":
            node_id = self.python_profile_stats[0].node_id
        records = [r for r in self.python_profile_stats if r.node_id == node_id]
        if not records:
            # A mistyped node would otherwise read as steps or times that were not profiled.
            logger.warning(
                "Node %r has no %s profiles; the nodes that have some: %s.",
                node_id,
                self.profiler,
                ", ".join(sorted({r.node_id for r in self.python_profile_stats})),
            )
        return records

    def _aggregate_stats(self, records: list[PythonStatsRecord], query: str) -> Any:
        raise NotImplementedError

    def _empty_message(self, query: str) -> None:
        where = self.s3_path or self.local_profile_dir
        other = ""
        if not self.python_profile_stats and self._other_profilers:
            # A job profiled with the other profiler would otherwise read as one without any.
            readers = {
                cls.profiler: cls.__name__ for cls in _PythonProfileAnalysis.__subclasses__()
            }
            other = "".join(
                f"; it has {name} profiles: read them with {readers[name]}"
                for name in self._other_profilers
            )
        logger.warning(
            "No %s profiles match %s under %s (%d profiles found in total%s).",
            self.profiler,
            query,
            where,
            len(self.python_profile_stats),
            other,
        )

    # -- queries (SageMaker's names) -----------------------------------------------------------

    def fetch_profile_stats_by_step(
        self,
        start_step: int,
        end_step: int | None = None,
        mode: PythonProfileModes = PythonProfileModes.TRAIN,
        start_phase: StepPhase = StepPhase.STEP_START,
        end_phase: StepPhase = StepPhase.STEP_END,
        node_id: str = "any",
        refresh_stats: bool = True,
    ) -> Any:
        """Profiles of ``mode`` lying within steps ``start_step``..``end_step`` (inclusive).

        A profile starting at ``start_step`` must not start before ``start_phase`` when that is a
        phase inside the step, and one ending at ``end_step`` must not end after ``end_phase``.

        :raises ConfigError: a step is not an integer >= 0, ``end_step`` is before ``start_step``,
            or a mode or phase is not one of its enum's values.
        """
        query = "fetch_profile_stats_by_step"
        start_step = check_int(f"{query}.start_step", plain_number(start_step), minimum=0)
        if end_step is None:
            end_step = start_step
        end_step = check_int(f"{query}.end_step", plain_number(end_step), minimum=start_step)
        mode = check_enum(f"{query}.mode", mode, PythonProfileModes)
        start_phase = check_enum(f"{query}.start_phase", start_phase, StepPhase)
        end_phase = check_enum(f"{query}.end_phase", end_phase, StepPhase)
        self._refresh_python_profile_stats(refresh_stats)
        selected = [
            r
            for r in self._by_node(node_id)
            if r.start_mode == mode
            and r.end_mode == mode
            and _in_step_interval(r, start_step, end_step, start_phase, end_phase)
        ]
        return self._aggregate_stats(selected, f"{mode.value} steps {start_step}..{end_step}")

    def fetch_profile_stats_by_time(
        self,
        start_time_since_epoch_in_secs: float,
        end_time_since_epoch_in_secs: float,
        node_id: str = "any",
        refresh_stats: bool = True,
    ) -> Any:
        """Profiles overlapping the interval (seconds since the epoch).

        SageMaker kept only profiles starting or ending inside it, missing one that spans it.

        :raises ConfigError: a bound is not a Unix time in seconds, or the end is before the start.
        """
        query = "fetch_profile_stats_by_time"
        start = check_unix_time(
            f"{query}.start_time_since_epoch_in_secs", plain_number(start_time_since_epoch_in_secs)
        )
        end = check_unix_time(
            f"{query}.end_time_since_epoch_in_secs", plain_number(end_time_since_epoch_in_secs)
        )
        if end < start:
            raise ConfigError(
                f"{query}.end_time_since_epoch_in_secs",
                end,
                f"a time at or after start_time_since_epoch_in_secs ({start})",
            )
        self._refresh_python_profile_stats(refresh_stats)
        lo, hi = start * 1e6, end * 1e6
        records = self._by_node(node_id)
        selected = [r for r in records if r.start_time_us <= hi and r.end_time_us >= lo]
        what = f"the time range {start_time_since_epoch_in_secs}..{end_time_since_epoch_in_secs} s"
        if records and not selected:
            # where the profiles are, so that bounds in µs (or ms) are seen for what they are
            first = min(r.start_time_us for r in records) / 1e6
            last = max(r.end_time_us for r in records) / 1e6
            what += f" since the epoch (the profiles span {first:.6f}..{last:.6f} s)"
        return self._aggregate_stats(selected, what)

    def fetch_profile_stats_between_modes(
        self,
        start_mode: PythonProfileModes,
        end_mode: PythonProfileModes,
        node_id: str = "any",
        refresh_stats: bool = True,
    ) -> Any:
        """Profiles that started in ``start_mode`` and ended in ``end_mode``.

        :raises ConfigError: a mode is not a :class:`PythonProfileModes` value.
        """
        query = "fetch_profile_stats_between_modes"
        start_mode = check_enum(f"{query}.start_mode", start_mode, PythonProfileModes)
        end_mode = check_enum(f"{query}.end_mode", end_mode, PythonProfileModes)
        self._refresh_python_profile_stats(refresh_stats)
        selected = [
            r
            for r in self._by_node(node_id)
            if r.start_mode == start_mode and r.end_mode == end_mode
        ]
        return self._aggregate_stats(selected, f"modes {start_mode.value} -> {end_mode.value}")

    def fetch_pre_step_zero_profile_stats(
        self, node_id: str = "any", refresh_stats: bool = True
    ) -> Any:
        """The profile from hook creation to the first step.

        Selected by mode, not by SageMaker's ``start`` phase: a post-hook-close window that
        starts at the hook's close (``posthookclose-*-start``) has that phase too.
        """
        self._refresh_python_profile_stats(refresh_stats)
        selected = [
            r for r in self._by_node(node_id) if r.start_mode == PythonProfileModes.PRE_STEP_ZERO
        ]
        return self._aggregate_stats(selected, "pre-step-zero")

    def fetch_post_hook_close_profile_stats(
        self, node_id: str = "any", refresh_stats: bool = True
    ) -> Any:
        """The profile from the hook closing to the end of the script.

        Selected by mode, not by SageMaker's ``end`` phase: a step's window that ended inside
        its step (where the script's own cProfile took over) has that phase too.
        """
        self._refresh_python_profile_stats(refresh_stats)
        selected = [
            r for r in self._by_node(node_id) if r.end_mode == PythonProfileModes.POST_HOOK_CLOSE
        ]
        return self._aggregate_stats(selected, "post-hook-close")

    def fetch_profile_stats_by_training_phase(
        self, node_id: str = "any", refresh_stats: bool = True
    ) -> dict[tuple[PythonProfileModes, PythonProfileModes], Any]:
        """Merged stats per (start mode, end mode) pair present, e.g. (PRE_STEP_ZERO, TRAIN)."""
        self._refresh_python_profile_stats(refresh_stats)
        groups: dict[tuple[PythonProfileModes, PythonProfileModes], list[PythonStatsRecord]] = {}
        for record in self._by_node(node_id):
            groups.setdefault((record.start_mode, record.end_mode), []).append(record)
        return {
            pair: self._aggregate_stats(records, f"modes {pair[0].value} -> {pair[1].value}")
            for pair, records in groups.items()
        }

    def fetch_profile_stats_by_job_phase(
        self, node_id: str = "any", refresh_stats: bool = True
    ) -> dict[str, Any]:
        """Merged stats for ``initialization`` (before step zero), ``training_loop`` and
        ``finalization`` (after the hook closed); a phase without profiles is an empty result."""
        self._refresh_python_profile_stats(refresh_stats)
        phases: dict[str, list[PythonStatsRecord]] = {
            "initialization": [],
            "training_loop": [],
            "finalization": [],
        }
        for record in self._by_node(node_id):
            if record.start_mode == PythonProfileModes.PRE_STEP_ZERO:
                phases["initialization"].append(record)
            elif record.end_mode == PythonProfileModes.POST_HOOK_CLOSE:
                phases["finalization"].append(record)
            else:
                phases["training_loop"].append(record)
        return {name: self._aggregate_stats(records, name) for name, records in phases.items()}

    def list_profile_stats(self, refresh_stats: bool = True) -> pd.DataFrame:
        """One row per profiled interval: the :class:`PythonStatsRecord` fields, then the same
        values under smdebug's names for those named otherwise (``profiler_name``,
        ``start_time_since_epoch_in_micros``, ``end_time_since_epoch_in_micros``, ``stats_path``),
        so that a notebook filtering smdebug's table runs unchanged."""
        import pandas as pd

        self._refresh_python_profile_stats(refresh_stats)
        columns = list(PythonStatsRecord.__dataclass_fields__)
        if not self.python_profile_stats:
            self._empty_message("any query")
        listing = pd.DataFrame([r.to_dict() for r in self.python_profile_stats], columns=columns)
        for sagemaker_name, ours in _SAGEMAKER_LISTING_NAMES.items():
            listing[sagemaker_name] = listing[ours]
        return listing

    def list_available_node_ids(self, refresh_stats: bool = True) -> list[str]:
        """The node ids that have profiles, sorted."""
        self._refresh_python_profile_stats(refresh_stats)
        return sorted({r.node_id for r in self.python_profile_stats})


#: smdebug's ``list_profile_stats`` column -> ours, where they differ.
_SAGEMAKER_LISTING_NAMES = {
    "profiler_name": "profiler",
    "start_time_since_epoch_in_micros": "start_time_us",
    "end_time_since_epoch_in_micros": "end_time_us",
    "stats_path": "path",
}


def _copy_once(files: RemoteFiles, remote: str, target: Path, size_bytes: int | None) -> None:
    """Copy the remote file ``remote`` (a path of ``files.fs``) to ``target``, unless an earlier
    refresh did: a copy of another size than the listing's ``size_bytes`` is a download cut off
    (or a file rewritten since), fetched again. The copy is written beside ``target`` and
    renamed, so a download that fails leaves no partial copy there."""
    if target.exists() and (size_bytes is None or target.stat().st_size == size_bytes):
        return
    if target.exists():
        logger.info(
            "%s holds %d of the %d bytes of %s; copying it again",
            target,
            target.stat().st_size,
            size_bytes,
            remote,
        )
    with replacing(target) as partial, files.requests():
        files.fs.get_file(remote, str(partial))


def _with_paths(record: PythonStatsRecord, path: str, html_path: str) -> PythonStatsRecord:
    values = record.__dict__ | {"path": path, "html_path": html_path}
    return PythonStatsRecord(**values)


_PHASE_ORDER = {phase: index for index, phase in enumerate(StepPhase)}


def _in_step_interval(
    record: PythonStatsRecord,
    start_step: int,
    end_step: int,
    start_phase: StepPhase,
    end_phase: StepPhase,
) -> bool:
    """Whether the record lies within [start_step@start_phase, end_step@end_phase]."""
    record_end = math.inf if record.end_step == -1 else record.end_step
    if record.start_step < start_step or record_end > end_step:
        return False
    if (
        record.start_step == start_step
        and _PHASE_ORDER[record.start_phase] < _PHASE_ORDER[start_phase]
    ):
        return False
    # A step's window that ended inside its step (phase "end": the script's own cProfile took
    # over) ended no later than the step's end.
    ended = record.end_phase
    if ended == StepPhase.END and record.end_step != -1:
        ended = StepPhase.STEP_END
    return not (record_end == end_step and _PHASE_ORDER[ended] > _PHASE_ORDER[end_phase])


class cProfileAnalysis(_PythonProfileAnalysis):
    """Queries over cProfile dumps; each returns one merged :class:`cProfileStats`."""

    profiler = "cprofile"

    def _aggregate_stats(self, records: list[PythonStatsRecord], query: str) -> cProfileStats:
        ps = pstats.Stats()
        if not records:
            self._empty_message(query)
            return cProfileStats(ps, [])
        merged = []
        for record in records:
            try:
                stats = pstats.Stats(record.path)
            except (OSError, EOFError, ValueError, TypeError) as exc:
                # A truncated dump (a full disk) must not take every query through it down.
                logger.warning("Skipping unreadable cProfile profile %s: %s", record.path, exc)
                continue
            ps.add(stats)
            merged.append(record)
        return cProfileStats(ps, merged)


class PyinstrumentAnalysis(_PythonProfileAnalysis):
    """Queries over pyinstrument profiles; each returns a :class:`PyinstrumentStats`."""

    profiler = "pyinstrument"

    def _aggregate_stats(self, records: list[PythonStatsRecord], query: str) -> PyinstrumentStats:
        if not records:
            self._empty_message(query)
            return PyinstrumentStats([])
        steps = []
        for record in records:
            try:
                with open(record.path, encoding="utf-8") as handle:
                    tree = json.load(handle)
            except (OSError, ValueError) as exc:
                logger.warning("Skipping unreadable pyinstrument profile %s: %s", record.path, exc)
                continue
            steps.append(PyinstrumentStepStats(record.html_path, tree, record))
        return PyinstrumentStats(steps)

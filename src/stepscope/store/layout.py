"""Every path of a job folder and of its profiler output, built and parsed in one place.

A job folder holds ``job.json``, ``profiler-output/`` (laid out exactly like SageMaker Debugger's
``LocalPath``, so its readers and ours read both), ``rule-output/`` and the columnar cache::

    <job>/job.json
    <job>/profiler-config.json
    <job>/profiler-output/
        system/incremental/<YYYYMMDDHH>/<epoch_minute_s>.algo-<n>.json
        framework/<node_id>_<suffix>.<pid>.tmp                     (the open timeline file)
        framework/pevents/<YYYYMMDDHH>/<end_us>_<node_id>_<suffix>  (closed timeline files)
        framework/pytorch/<cprofile|pyinstrument>/<node_id>/<start>_<end>/python_stats[.json|.html]
        framework/pytorch/detailed_profiling/<YYYYMMDDHH>/<step:09d>/<node_id>_<start_us>_<end_us>.pt.trace.json.gz
        framework/ranks/<node_id>.json
        framework/ranks/<node_id>.ended                             (its profile() has ended)
        training_job_end.ts
        monitor-algo-<n>.log                                        (the node's monitor's log)
        .monitor-algo-<n>.lock                                      (held by the node's monitor)
    <job>/rule-output/<RuleName>/status.json
    <job>/rule-output/profiler-reports/<RuleName>.json
    <job>/rule-output/profiler-report.html
    <job>/.stepscope/cache/

Hour folders (``YYYYMMDDHH``) are always UTC. Nodes are named ``algo-<n>`` with ``n`` = node
index + 1, as on SageMaker; framework files use the node id ``<rank>-algo-<n>``.

Where we differ from SageMaker: the open ``.tmp`` file carries the writer's pid, because a
forked DataLoader worker or a relaunched process may write under the same node id at the same
time (SageMaker uses one fixed ``.tmp`` name per node and suffix). Readers leave a ``.tmp`` alone
while it is written, and read the one a rank left open when it died (by its pid and rank file).
"""

from __future__ import annotations

import re
import time
from pathlib import Path, PurePosixPath
from typing import NamedTuple

__all__ = [
    "CPROFILE_STATS_FILE",
    "DETAILED_TRACE_RE",
    "FRAMEWORK_FILE_RE",
    "FRAMEWORK_TMP_RE",
    "HOUR_FOLDER_RE",
    "NODE_ID_RE",
    "NODE_NAME_RE",
    "PYINSTRUMENT_STATS_FILES",
    "PYTHON_STATS_FOLDER_RE",
    "PYTHON_STATS_MODES",
    "PYTHON_STATS_PHASES",
    "SYSTEM_FILE_RE",
    "TIMELINE_SUFFIXES",
    "FrameworkFileName",
    "StatsBoundary",
    "SystemFileName",
    "cache_dir",
    "detailed_profiling_trace_path",
    "framework_dir",
    "hour_folder",
    "job_end_marker_path",
    "job_end_marker_paths",
    "job_file_path",
    "job_has_ended",
    "job_name",
    "minute_start_s",
    "new_job_folder_name",
    "monitor_lock_path",
    "monitor_log_path",
    "node_id_for",
    "node_name",
    "output_job_name",
    "parse_framework_file_name",
    "parse_node_id",
    "parse_python_stats_folder",
    "parse_system_file_name",
    "pevents_dir",
    "pevents_file_path",
    "profiler_output_dir",
    "python_stats_dir",
    "python_stats_folder_name",
    "rank_end_path",
    "rank_file_path",
    "report_html_path",
    "rule_output_dir",
    "rule_report_path",
    "rule_status_path",
    "system_dir",
    "system_file_path",
    "trace_name",
    "timeline_tmp_path",
]

# -- job folder ------------------------------------------------------------------------------

_JOB_FILE = "job.json"
_PROFILER_OUTPUT = "profiler-output"
_RULE_OUTPUT = "rule-output"
_CACHE = (".stepscope", "cache")
_JOB_END_MARKER = "training_job_end.ts"


def job_file_path(job_dir: str | Path) -> Path:
    """``<job>/job.json``: the job's metadata (see the job.json contract)."""
    return Path(job_dir) / _JOB_FILE


def profiler_output_dir(job_dir: str | Path) -> Path:
    """``<job>/profiler-output``: the equivalent of SageMaker Debugger's ``LocalPath``."""
    return Path(job_dir) / _PROFILER_OUTPUT


def rule_output_dir(job_dir: str | Path) -> Path:
    """``<job>/rule-output``: rule statuses, rule reports and the HTML report."""
    return Path(job_dir) / _RULE_OUTPUT


def rule_status_path(job_dir: str | Path, rule: str) -> Path:
    """``<job>/rule-output/<rule>/status.json``: the live verdict of one rule."""
    return rule_output_dir(job_dir) / rule / "status.json"


def rule_report_path(job_dir: str | Path, rule: str) -> Path:
    """``<job>/rule-output/profiler-reports/<rule>.json``: SageMaker's per-rule report dict."""
    return rule_output_dir(job_dir) / "profiler-reports" / f"{rule}.json"


def report_html_path(job_dir: str | Path) -> Path:
    """``<job>/rule-output/profiler-report.html``: the self-contained profiling report."""
    return rule_output_dir(job_dir) / "profiler-report.html"


def cache_dir(job_dir: str | Path) -> Path:
    """``<job>/.stepscope/cache``: the columnar cache of a writable job folder."""
    return Path(job_dir).joinpath(*_CACHE)


# -- inside profiler-output ------------------------------------------------------------------


def system_dir(output_dir: str | Path) -> Path:
    """``<profiler-output>/system``: the system-metrics tree."""
    return Path(output_dir) / "system"


def framework_dir(output_dir: str | Path) -> Path:
    """``<profiler-output>/framework``: timelines, python stats, detailed traces, rank files."""
    return Path(output_dir) / "framework"


def pevents_dir(output_dir: str | Path) -> Path:
    """``<profiler-output>/framework/pevents``: closed timeline files, in hour folders."""
    return framework_dir(output_dir) / "pevents"


def job_end_marker_path(output_dir: str | Path) -> Path:
    """``<profiler-output>/training_job_end.ts``: where stepscope writes the end-of-job marker."""
    return Path(output_dir) / _JOB_END_MARKER


def job_end_marker_paths(output_dir: str | Path) -> tuple[Path, Path, Path]:
    """Every place an end-of-job marker may be: the root, ``system/`` and ``framework/``.

    SageMaker Debugger's ``ProfilerTrial`` looks in ``system/`` and ``framework/``; stepscope
    writes the root one and the ``system/`` one, so both libraries see the job end.
    """
    name = _JOB_END_MARKER
    return (
        Path(output_dir) / name,
        system_dir(output_dir) / name,
        framework_dir(output_dir) / name,
    )


def job_has_ended(output_dir: str | Path) -> bool:
    """Whether any end-of-job marker exists (three ``stat`` calls; cheap enough to poll)."""
    return any(path.exists() for path in job_end_marker_paths(output_dir))


def monitor_log_path(output_dir: str | Path, node: str) -> Path:
    """``<profiler-output>/monitor-<node>.log``: the log of ``node``'s system monitor process,
    named by its node so that the profiler outputs of a job's nodes merge into one folder."""
    return Path(output_dir) / f"monitor-{node}.log"


def monitor_lock_path(output_dir: str | Path, node: str) -> Path:
    """``<profiler-output>/.monitor-<node>.lock``: held by the running monitor of ``node``."""
    return Path(output_dir) / f".monitor-{node}.lock"


def rank_file_path(output_dir: str | Path, node_id: str) -> Path:
    """``<profiler-output>/framework/ranks/<node_id>.json``: one instrumented rank's identity."""
    return framework_dir(output_dir) / "ranks" / f"{node_id}.json"


def rank_end_path(output_dir: str | Path, node_id: str) -> Path:
    """``<profiler-output>/framework/ranks/<node_id>.ended``: that rank's ``profile()`` ended."""
    return framework_dir(output_dir) / "ranks" / f"{node_id}.ended"


def job_name(name: str, fallback: str) -> str:
    """``name`` as the start of a new job folder's name: runs of characters other than letters,
    digits, ``_``, ``.`` and ``-`` become ``-``, and no ``-`` leads, so a command line takes the
    folder for a path, not an option (``-c`` of ``python -c`` would make ``-c-<time>``);
    ``fallback`` when nothing is left."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or fallback


def new_job_folder_name(name: str) -> str:
    """``<name>-<YYYYMMDD-HHMMSS>``: a new job's folder, named by the time now in UTC, the time
    every page and the report give (a local time would disagree with them, and repeat itself when
    the clocks go back)."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def output_job_name(folder: str | Path) -> str:
    """What the job of a profiler output folder (a path or an ``s3://`` URL) is called: the
    folder's name, or for SageMaker's ``<job>/profiler-output`` given itself, its job's (two jobs
    named ``profiler-output`` would share their list row and their export's default name)."""
    path = PurePosixPath(str(folder).rstrip("/"))
    if path.name == _PROFILER_OUTPUT and path.parent.name:
        return path.parent.name
    return path.name


def trace_name(file_name: str) -> str:
    """What a job of one PyTorch profiler trace is called: its file name without ``.gz``,
    ``.json`` and ``.pt.trace`` (``rank-0.pt.trace.json.gz`` is ``rank-0``), in the job list as
    in the default name of its export."""
    for suffix in (".gz", ".json", ".pt.trace"):
        file_name = file_name.removesuffix(suffix)
    return file_name


# -- time folders ----------------------------------------------------------------------------

#: An hour folder name: ``YYYYMMDDHH``.
HOUR_FOLDER_RE = re.compile(r"^\d{10}$")


def hour_folder(timestamp_s: float) -> str:
    """The UTC hour folder ``YYYYMMDDHH`` holding a file whose timestamp is ``timestamp_s``.

    :param timestamp_s: seconds since the Unix epoch.
    """
    return time.strftime("%Y%m%d%H", time.gmtime(timestamp_s))


def minute_start_s(timestamp_s: float) -> int:
    """The epoch second at which the minute containing ``timestamp_s`` starts."""
    return int(timestamp_s // 60) * 60


# -- nodes -----------------------------------------------------------------------------------

#: A node name as system files carry it: ``algo-<n>``.
NODE_NAME_RE = re.compile(r"^algo-(?P<n>\d+)$")

#: A framework node id as stepscope writes it: ``<rank>-algo-<n>``.
NODE_ID_RE = re.compile(r"^(?P<rank>\d+)-(?P<node>algo-\d+)$")


def node_name(node_index: int) -> str:
    """``algo-<node_index + 1>``: the SageMaker name of the node with 0-based ``node_index``."""
    return f"algo-{node_index + 1}"


def node_id_for(rank: int, node: int | str) -> str:
    """The node id ``<rank>-algo-<n>`` that names one rank's framework files.

    :param rank: the global rank (0 for a single process).
    :param node: the node's 0-based index (``0`` gives ``algo-1``) or its name (``"algo-1"``).
    """
    name = node_name(node) if isinstance(node, int) else node
    return f"{rank}-{name}"


def parse_node_id(node_id: str) -> tuple[int, str] | None:
    """``(rank, node)`` from a node id ``<rank>-algo-<n>``, or ``None`` for other shapes.

    SageMaker node ids without a resource config look like ``<pid>-<hostname>``; they return
    ``None`` and callers keep the id as it is.
    """
    match = NODE_ID_RE.match(node_id)
    if match is None:
        return None
    return int(match["rank"]), match["node"]


# -- system files ----------------------------------------------------------------------------

#: A system-metrics file name: ``<epoch_minute_s>.algo-<n>.json`` (SageMaker's reader requires
#: exactly 10 digits and an ``algo-`` node; other names are ignored).
SYSTEM_FILE_RE = re.compile(r"^(?P<minute_s>\d{10})\.(?P<node>algo-\d+)\.json$")


class SystemFileName(NamedTuple):
    """The parts of a system-metrics file name."""

    minute_s: int
    node: str


def system_file_path(output_dir: str | Path, node: str, timestamp_s: float) -> Path:
    """The system-metrics file holding records of ``node`` taken at ``timestamp_s``.

    ``system/incremental/<YYYYMMDDHH>/<epoch_minute_s>.<node>.json``: one file per minute and node.

    :param node: the node name, ``algo-<n>``.
    :param timestamp_s: any time within the minute, seconds since the epoch.
    """
    minute_s = minute_start_s(timestamp_s)
    return (
        system_dir(output_dir) / "incremental" / hour_folder(minute_s) / f"{minute_s}.{node}.json"
    )


def parse_system_file_name(file_name: str) -> SystemFileName | None:
    """The minute and node of a system-metrics file name, or ``None`` if it is not one."""
    match = SYSTEM_FILE_RE.match(file_name)
    if match is None:
        return None
    return SystemFileName(int(match["minute_s"]), match["node"])


# -- framework timeline files ----------------------------------------------------------------

#: The timeline file suffixes SageMaker's readers know, each read by its own parser.
TIMELINE_SUFFIXES: tuple[str, ...] = (
    "pythontimeline.json",
    "model_timeline.json",
    "horovod_timeline.json",
    "smdataparallel_timeline.json",
)

_SUFFIX_ALTERNATIVES = "|".join(re.escape(suffix) for suffix in TIMELINE_SUFFIXES)

#: A closed timeline file name: ``<end_us>_<node_id>_<suffix>``. The node id may itself hold
#: ``_`` (old SageMaker ids like ``4487_0000``); the suffix is anchored at the end.
FRAMEWORK_FILE_RE = re.compile(
    rf"^(?P<end_us>\d+)_(?P<node_id>.+)_(?P<suffix>{_SUFFIX_ALTERNATIVES})$"
)

#: The open timeline file name: ``<node_id>_<suffix>.<pid>.tmp`` (SageMaker: no ``.<pid>``).
FRAMEWORK_TMP_RE = re.compile(
    rf"^(?P<node_id>.+)_(?P<suffix>{_SUFFIX_ALTERNATIVES})(?:\.(?P<pid>\d+))?\.tmp$"
)


class FrameworkFileName(NamedTuple):
    """The parts of a closed timeline file name."""

    end_us: int
    node_id: str
    suffix: str


def pevents_file_path(output_dir: str | Path, end_us: int, node_id: str, suffix: str) -> Path:
    """Where a timeline file whose last event ends at ``end_us`` is closed into.

    ``framework/pevents/<YYYYMMDDHH of end_us>/<end_us>_<node_id>_<suffix>``. SageMaker's
    comment says the hour is the start time; its code, and so this, uses the end time.

    :param end_us: the end of the file's last event, µs since the epoch.
    :param suffix: one of :data:`TIMELINE_SUFFIXES`.
    """
    return pevents_dir(output_dir) / hour_folder(end_us / 1e6) / f"{end_us}_{node_id}_{suffix}"


def timeline_tmp_path(output_dir: str | Path, node_id: str, suffix: str, pid: int) -> Path:
    """``framework/<node_id>_<suffix>.<pid>.tmp``: the timeline file a writer has open."""
    return framework_dir(output_dir) / f"{node_id}_{suffix}.{pid}.tmp"


def parse_framework_file_name(file_name: str) -> FrameworkFileName | None:
    """The end time, node id and suffix of a closed timeline file, or ``None``.

    Old SageMaker files sometimes carry nanoseconds instead of µs in the first field; it is
    returned as written, and readers take times from the file content anyway.
    """
    match = FRAMEWORK_FILE_RE.match(file_name)
    if match is None:
        return None
    return FrameworkFileName(int(match["end_us"]), match["node_id"], match["suffix"])


# -- python profiler stats -------------------------------------------------------------------

#: Modes of a python-stats boundary (``prestepzero``/``posthookclose`` have step ``*``).
PYTHON_STATS_MODES: tuple[str, ...] = (
    "train",
    "eval",
    "predict",
    "global",
    "prestepzero",
    "posthookclose",
)

#: Phases of a python-stats boundary.
PYTHON_STATS_PHASES: tuple[str, ...] = ("start", "stepstart", "forwardpassend", "stepend", "end")

#: The stats file cProfile writes (a ``pstats`` marshal dump).
CPROFILE_STATS_FILE = "python_stats"

#: The files pyinstrument writes (JSON renderer output, HTML renderer output).
PYINSTRUMENT_STATS_FILES: tuple[str, str] = ("python_stats.json", "python_stats.html")

_MODES = "|".join(PYTHON_STATS_MODES)
_PHASES = "|".join(PYTHON_STATS_PHASES)
_BOUNDARY = (
    r"(?P<{p}mode>{modes})-(?P<{p}step>\d+|\*)-(?P<{p}phase>{phases})-(?P<{p}us>\d+(?:\.\d*)?)"
)

#: A python-stats folder name: ``<sMode>-<sStep>-<sPhase>-<sUs>_<eMode>-<eStep>-<ePhase>-<eUs>``.
PYTHON_STATS_FOLDER_RE = re.compile(
    "^"
    + _BOUNDARY.format(p="s", modes=_MODES, phases=_PHASES)
    + "_"
    + _BOUNDARY.format(p="e", modes=_MODES, phases=_PHASES)
    + "$"
)


class StatsBoundary(NamedTuple):
    """One end of a python-profiling window.

    :param mode: one of :data:`PYTHON_STATS_MODES`.
    :param step: the step number, or ``None`` for ``prestepzero``/``posthookclose`` (written ``*``).
    :param phase: one of :data:`PYTHON_STATS_PHASES`.
    :param time_us: µs since the epoch (float, as SageMaker writes it).
    """

    mode: str
    step: int | None
    phase: str
    time_us: float


def _boundary_text(boundary: StatsBoundary) -> str:
    step = "*" if boundary.step is None else str(boundary.step)
    return f"{boundary.mode}-{step}-{boundary.phase}-{float(boundary.time_us)}"


def python_stats_folder_name(start: StatsBoundary, end: StatsBoundary) -> str:
    """``<sMode>-<sStep>-<sPhase>-<sUs>_<eMode>-<eStep>-<ePhase>-<eUs>`` for one window."""
    return f"{_boundary_text(start)}_{_boundary_text(end)}"


def python_stats_dir(
    output_dir: str | Path,
    profiler: str,
    node_id: str,
    start: StatsBoundary,
    end: StatsBoundary,
    *,
    framework: str = "pytorch",
) -> Path:
    """``framework/<framework>/<profiler>/<node_id>/<window>/``: where one window's stats go.

    :param profiler: ``"cprofile"`` or ``"pyinstrument"``.
    :param framework: ``"pytorch"`` (or ``"tensorflow"`` for SageMaker outputs).
    """
    return (
        framework_dir(output_dir)
        / framework
        / profiler
        / node_id
        / python_stats_folder_name(start, end)
    )


def parse_python_stats_folder(folder_name: str) -> tuple[StatsBoundary, StatsBoundary] | None:
    """The two boundaries of a python-stats folder name, or ``None`` if it is not one."""
    match = PYTHON_STATS_FOLDER_RE.match(folder_name)
    if match is None:
        return None

    def boundary(p: str) -> StatsBoundary:
        step = match[f"{p}step"]
        return StatsBoundary(
            match[f"{p}mode"],
            None if step == "*" else int(step),
            match[f"{p}phase"],
            float(match[f"{p}us"]),
        )

    return boundary("s"), boundary("e")


# -- detailed (kernel-level) traces ----------------------------------------------------------

#: A detailed-profiling trace file name: ``<node_id>_<start_us>_<end_us>.pt.trace.json.gz``.
DETAILED_TRACE_RE = re.compile(
    r"^(?P<node_id>.+)_(?P<start_us>\d+)_(?P<end_us>\d+)\.pt\.trace\.json\.gz$"
)


def detailed_profiling_trace_path(
    output_dir: str | Path, step: int, node_id: str, start_us: int, end_us: int
) -> Path:
    """Where the Kineto trace of one detailed-profiling window goes.

    ``framework/pytorch/detailed_profiling/<YYYYMMDDHH of start_us>/<step:09d>/
    <node_id>_<start_us>_<end_us>.pt.trace.json.gz``.

    :param step: the first step of the window.
    :param start_us: window start, µs since the epoch.
    :param end_us: window end, µs since the epoch.
    """
    return (
        framework_dir(output_dir)
        / "pytorch"
        / "detailed_profiling"
        / hour_folder(start_us / 1e6)
        / f"{step:09d}"
        / f"{node_id}_{int(start_us)}_{int(end_us)}.pt.trace.json.gz"
    )

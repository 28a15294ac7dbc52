"""Running rules over a job: the incremental scan shared by the live and offline engines.

A :class:`RuleSession` owns the rule instances of one job and a watermark. Each
:meth:`RuleSession.advance` asks the job for new data (``JobData.refresh()``), scans the window
from the watermark to the end of what is safely complete, and moves the watermark, so every
sample and event is scanned exactly once. While the job runs, "safely complete" is the newest
record of the slowest live stream (each event source of each rank and the system metrics of each
node are written to separate files, closed at different times; a stream silent for two minutes
is taken as finished), and at least two minutes behind the newest record of all (a file is
closed up to a minute after its first record, so a stream may appear late), floored to a whole
second. The final pass takes everything.

A rule that raises is marked Error with the reason; the others go on. Offline,
:func:`run_rules` makes one final pass over the whole job: because rules are incremental and
window-independent, that gives the same verdicts as the live engine's sixty one-minute scans.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stepscope.errors import ConfigError
from stepscope.rules.base import Rule, RuleResult, Verdict
from stepscope.rules.configs import build_rules
from stepscope.rules.status import unwritable, write_results, write_source
from stepscope.rules.window import ScanWindow, earliest_event_start
from stepscope.store.filesystem import LocalFiles, local_output_path

__all__ = [
    "RuleSession",
    "input_name",
    "open_input",
    "rule_output_dir",
    "run_rules",
    "still_running",
]

logger = logging.getLogger(__name__)

#: Live scans stay this far behind the newest record (a file is closed up to a minute after its
#: first record), and a stream this much older than the newest is taken as finished (a writer
#: that stopped) and no longer holds the scans back.
_STREAM_GRACE_US = 120_000_000

#: No scan window holds more than this much data time (offline passes over long jobs).
_MAX_WINDOW_US = 3600 * 1_000_000

#: What every rule says while the job runs and the scans have not reached its first record.
_WAITING = Verdict(
    applicable=False,
    message="Waiting for data: while the job runs, the rules judge records once they are two "
    "minutes old.",
)

_OLDEST_SQL = """
SELECT least((SELECT min(timestamp_us) FROM system), (SELECT min(start_us + dur_us) FROM events))
"""

# The newest record of each stream: each event source of each rank, the system metrics of each
# node. Files of different streams are closed at different times, so the scans may only go as far
# as the slowest live stream.
_END_SQL = """
WITH streams AS (
    SELECT 'events' AS kind, max(start_us + dur_us) AS last_us FROM events
    WHERE start_us >= {since} GROUP BY source, node, rank
    UNION ALL
    SELECT 'system' AS kind, max(timestamp_us) AS last_us FROM system
    WHERE timestamp_us >= {since} GROUP BY node
), newest AS (SELECT max(last_us) AS last_us FROM streams)
SELECT
    (SELECT last_us FROM newest) AS newest_us,
    (SELECT min(last_us) FROM streams WHERE last_us >= (SELECT last_us FROM newest) - {grace})
        AS slowest_us,
    (SELECT count(*) FROM streams WHERE kind = 'events') AS event_streams
"""


class RuleSession:
    """The rules of one job and how far they have scanned.

    :param job: a ``JobData`` (anything with ``refresh()`` and ``connect()``).
    :param rules: configured rules (see :func:`~stepscope.rules.configs.build_rules`).
    """

    def __init__(self, job: Any, rules: Sequence[Any] | None = None) -> None:
        self.job = job
        self.rules: list[Rule] = build_rules(rules)
        self.active: list[Rule] = [r for rule in self.rules for r in (rule, *rule.subrules())]
        self.failed: dict[str, str] = {}
        self.watermark_us = 0
        self.final = False
        self._looked = False
        self._con: Any = None

    @property
    def scan_interval_us(self) -> int:
        """The shortest ``scan_interval_us`` of the rules: how often the live engine scans."""
        return min(int(rule.parameters["scan_interval_us"]) for rule in self.active)

    def advance(self, *, final: bool = False) -> bool:
        """Scan the new data; ``final`` takes everything. Returns True if a window was scanned."""
        refresh = getattr(self.job, "refresh", None)
        added = refresh() if callable(refresh) else None
        if added is False and self._looked and not final:
            # nothing new since the last look: the end of what is safely complete cannot move
            return False
        self._looked = True
        con = self._connect()
        time_spans = getattr(self.job, "time_spans", None)
        spans = time_spans("events") if callable(time_spans) else None
        end_us = self._end_us(con, final, spans)
        self.final = self.final or final
        if end_us is None or end_us <= self.watermark_us:
            return False
        windows = self._windows(con, end_us, final)
        for start, stop in windows:
            window = ScanWindow(
                con,
                start,
                stop,
                final=final and stop == end_us,
                events_from_us=earliest_event_start(spans, start, stop),
            )
            try:
                for rule in self.active:
                    if rule.rule_name() not in self.failed:
                        self._scan(rule, window)
            finally:
                window.close()
            self.watermark_us = stop
        return bool(windows)

    def _connect(self) -> Any:
        """The job's connection over its segments as they are now.

        A ``JobData`` keeps the session's connection and only renews its views (a new DuckDB
        connection costs about 15 ms, a live scan's own budget is 100 ms); other job objects
        give a new one each time.
        """
        if self._con is not None and self._connected_job():
            return self.job.connect(into=self._con)
        self._con = self.job.connect_own() if self._connected_job() else self.job.connect()
        # every query of a scan reads the same segments: keep their Parquet footers in memory
        # (a kept connection re-reads a footer when its file's modification time changes)
        self._con.execute("SET parquet_metadata_cache = true")
        return self._con

    def _connected_job(self) -> bool:
        """Whether the job is a ``JobData``: its views and manifest are the same segments."""
        from stepscope.store import JobData

        return isinstance(self.job, JobData)

    def _windows(self, con: Any, end_us: int, final: bool) -> list[tuple[int, int]]:
        """``[watermark, end)`` cut into windows of at most an hour of data; none before the
        first record is due (the watermark stays at 0: nothing judged yet).

        A long job is scanned in pieces so that no query holds more than an hour of samples
        and events at once; the rules give the same verdicts however the data is cut.
        """
        start = self.watermark_us
        if start == 0:
            oldest = con.execute(_OLDEST_SQL).fetchone()[0]
            if oldest is None or oldest >= end_us:
                return [(0, end_us)] if final else []
            first_cut = (int(oldest) // _MAX_WINDOW_US + 1) * _MAX_WINDOW_US
        else:
            first_cut = start + _MAX_WINDOW_US
        cuts = list(range(first_cut, end_us, _MAX_WINDOW_US))
        edges = [start, *cuts, end_us]
        return list(zip(edges[:-1], edges[1:], strict=True))

    def _scan(self, rule: Rule, window: ScanWindow) -> None:
        if window.final:
            rule.ended = True
        try:
            rule.scan(window)
        except Exception as exc:
            logger.exception("rule %s failed; the other rules go on", rule.rule_name())
            self.failed[rule.rule_name()] = f"{type(exc).__name__}: {exc}"

    def _end_us(
        self, con: Any, final: bool, event_spans: list[tuple[str, float, float]] | None
    ) -> int | None:
        # Only records started since shortly before the watermark can be the newest of a live
        # stream; the bound lets the Parquet statistics skip the older segments.
        since = max(0, self.watermark_us - 2 * _STREAM_GRACE_US)
        if event_spans is not None and self._connected_job():
            # the manifest knows each stream's newest record: no query needed
            newest, slowest, event_streams = _stream_ends(
                event_spans, self.job.time_spans("system"), since
            )
        else:
            newest, slowest, event_streams = con.execute(
                _END_SQL.format(grace=_STREAM_GRACE_US, since=since)
            ).fetchone()
        if newest is None:
            return None if since == 0 else self.watermark_us
        if final:
            return int(newest) + 1
        # Writers close a file up to a minute after its first record, so a stream that has not
        # appeared yet may still bring records that old: stay the grace period behind the newest.
        end = int(newest) - _STREAM_GRACE_US
        if event_streams and slowest is not None:
            end = min(end, int(slowest))
        return (end // 1_000_000) * 1_000_000

    def results(self) -> dict[str, RuleResult]:
        """Every rule's current result (sub-rules of ProfilerReport included), by rule name."""
        verdicts: dict[str, Verdict] = {}
        errors: dict[str, str] = {}
        summarised = {sub.rule_name() for rule in self.active for sub in rule.subrules()}
        # sub-rules first: a rule with sub-rules (ProfilerReport) summarises their verdicts, even
        # those of a sub-rule whose scan failed (its own result is an error all the same)
        for rule in sorted(self.active, key=lambda rule: bool(rule.subrules())):
            name = rule.rule_name()
            names = [subrule.rule_name() for subrule in rule.subrules()]
            if name in self.failed and name not in summarised:
                continue
            try:
                if names:
                    known = {n: verdicts[n] for n in names if n in verdicts}
                    verdict = rule.evaluate_from(known)
                elif self.watermark_us == 0 and not self.final:
                    verdict = _WAITING
                else:
                    verdict = rule.evaluate()
                if not isinstance(verdict, Verdict):  # a rule ported from SageMaker's, say
                    raise TypeError(f"evaluate() must return a Verdict, got {verdict!r}")
                verdicts[name] = verdict
            except Exception as exc:
                logger.exception("rule %s failed to evaluate", name)
                errors[name] = f"{type(exc).__name__}: {exc}"
        results: dict[str, RuleResult] = {}
        for rule in self.active:
            name = rule.rule_name()
            if name in self.failed or name in errors:
                results[name] = RuleResult.error(rule, self.failed.get(name) or errors[name])
                continue
            result = RuleResult.from_verdict(rule, verdicts[name], final=self.final)
            problem = unwritable(result)
            if problem is not None:
                logger.warning("rule %s gave a verdict JSON cannot hold: %s", name, problem)
                result = RuleResult.error(rule, f"its verdict cannot be written as JSON: {problem}")
            results[name] = result
        for rule in self.active:
            summary = results.get(rule.rule_name())
            if rule.subrules() and summary is not None and summary.status != "Error":
                # each sub-rule as its own status file says (InProgress while the job runs,
                # Error when its scan failed), not as the summary saw its verdict
                listed = summary.details.setdefault("rules", {})
                for name in listed:
                    listed[name] = results[name].status
        return results


def _stream_ends(
    event_spans: list[tuple[str, float, float]],
    system_spans: list[tuple[str, float, float]],
    since_us: int,
) -> tuple[float | None, float | None, int]:
    """What ``_END_SQL`` computes, from the raw files' spans (``JobData.time_spans``): the newest
    record of all, the newest of the slowest live stream, and the number of event streams.

    A stream counts when its newest record ends at or after ``since_us``.
    """
    newest_of: dict[tuple[str, str], float] = {}
    for kind, spans in (("events", event_spans), ("system", system_spans)):
        for stream, _, last_us in spans:
            key = (kind, stream)
            newest_of[key] = max(newest_of.get(key, last_us), last_us)
    live = {key: last_us for key, last_us in newest_of.items() if last_us >= since_us}
    if not live:
        return None, None, 0
    newest = max(live.values())
    slowest = min(last_us for last_us in live.values() if last_us >= newest - _STREAM_GRACE_US)
    return newest, slowest, sum(1 for kind, _ in live if kind == "events")


def open_input(path_or_job: Any) -> Any:
    """A ``JobData`` for a path (through ``stepscope.store.open_job``), or the object itself."""
    if hasattr(path_or_job, "connect"):
        return path_or_job
    from stepscope.store import open_job

    return open_job(path_or_job)


def input_name(job: Any) -> str:
    """What ``job`` was read from, as a results folder records it: a local path resolved, a URL
    as it is."""
    path = str(getattr(job, "path", ""))
    return path if not path or "://" in path else str(Path(path).resolve())


def rule_output_dir(job: Any, output_dir: str | os.PathLike[str] | None) -> Path:
    """Where results go: ``output_dir``, else ``<job>/rule-output`` for a writable job folder.

    :raises ConfigError: the input is read-only (a trace file, an S3 path, a read-only folder)
        and no ``output_dir`` was given.
    """
    if output_dir is not None:
        return local_output_path("output_dir", output_dir)
    path = getattr(job, "path", None)
    local = Path(str(path)) if path is not None and "://" not in str(path) else None
    # by its permission bits, as the cache judges it: root may write anywhere
    if local is not None and local.is_dir() and LocalFiles(local).writable():
        return local / "rule-output"
    raise ConfigError(
        "output_dir",
        None,
        "a folder to write the results of a read-only input to",
        f"{path} is not a writable job folder.",
        missing=True,
    )


def still_running(job: Any) -> bool:
    """Whether ``stepscope run`` still runs ``job``: it has a ``job.json``, has not ended, and
    its status is Running (see :mod:`stepscope.store.job_status`: the job of a killed launcher
    is not). Its live rule engine writes the job's ``rule-output`` meanwhile."""
    metadata = getattr(job, "metadata", None)
    if not isinstance(metadata, dict):
        return False
    running = metadata.get("status") == "Running" and not metadata.get("ended")
    return bool(metadata.get("job")) and running


def run_rules(
    path: Any,
    rules: Sequence[Any] | None = None,
    *,
    output_dir: str | os.PathLike[str] | None = None,
) -> dict[str, RuleResult]:
    """Run rules over a recorded job and write their status files and report JSONs.

    :param path: a job folder, a SageMaker Debugger output folder (local or ``s3://``), a Kineto
        trace or a folder of traces -- anything ``open_job`` reads -- or a ``JobData``.
    :param rules: ``ProfilerRule`` objects, ``rule_configs.<Rule>()`` configs, Rule subclasses
        or instances, or rule names; default ``ProfilerReport`` (all built-in rules).
    :param output_dir: where to write; default ``<job>/rule-output``, required for read-only
        inputs and for a job that is still running (whose live engine writes its own folder;
        the verdicts are then on the data so far, ``InProgress`` until they find an issue).
    :returns: every rule's result by name (ProfilerReport's sub-rules included).
    """
    job = open_input(path)
    running = still_running(job)
    if running and output_dir is None:
        raise ConfigError(
            "output_dir",
            None,
            "a folder other than the job's own while the job runs",
            f"{job.path} is still running: its live rule engine writes {job.path}/rule-output, "
            "and a pass now would replace those verdicts with ones on part of the job. Wait for "
            "the job to end, or name another folder for verdicts on the data so far.",
            missing=True,
        )
    session = RuleSession(job, rules)
    destination = rule_output_dir(job, output_dir)
    started = time.perf_counter()
    session.advance(final=not running)
    results = session.results()
    write_results(destination, results)
    if output_dir is not None:
        write_source(destination, input_name(job))
    logger.debug("ran %d rules in %.2f s", len(results), time.perf_counter() - started)
    return results

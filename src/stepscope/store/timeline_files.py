"""Closed timeline files: publishing one under its pevents name, recovering what a dead writer left.

A :class:`~stepscope.store.timeline_writer.TimelineWriter` writes into
``framework/<node_id>_<suffix>.<pid>.tmp`` and, on close, moves the finished file to
``framework/pevents/<YYYYMMDDHH>/<end_us>_<node_id>_<suffix>`` (:func:`publish_closed_file`).
A writer killed with its file open leaves the ``.tmp`` behind; :func:`recover_timeline_files`
finishes such files (cutting a torn last record) and publishes them the same way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson

from stepscope.store.layout import FRAMEWORK_TMP_RE, framework_dir, pevents_file_path

__all__ = ["pid_running", "publish_closed_file", "recover_timeline_files"]

logger = logging.getLogger(__name__)

#: Names tried after a taken one (the next µs each) before publishing gives up.
_NAME_ATTEMPTS = 1000


def recover_timeline_files(profiler_output_dir: str | Path) -> list[Path]:
    """Close the files that writer processes left open when they died (``kill -9``, OOM kill).

    Each ``framework/<node_id>_<suffix>.<pid>.tmp`` whose process no longer runs keeps its complete
    records (a torn last record is cut), gets its JSON array finished and is moved into
    ``pevents/`` exactly like a normal close; one without a complete event is removed, and so is
    one already published (its writer died between the two steps of a close). Files of
    running processes and SageMaker's pid-less ``.tmp`` names are left alone. Call it once the
    training processes have exited; it never raises for one bad file (logs it and goes on).

    :returns: the recovered files, now in ``pevents/``.
    """
    recovered = []
    for tmp_path in sorted(framework_dir(profiler_output_dir).glob("*.tmp")):
        match = FRAMEWORK_TMP_RE.match(tmp_path.name)
        if match is None or match["pid"] is None or pid_running(int(match["pid"])):
            continue
        try:
            if tmp_path.stat().st_nlink > 1:
                # its writer died between publishing it (a hard link in pevents/) and removing
                # this name: the file is closed and in pevents/ already
                tmp_path.unlink()
                continue
            end_us = _finish_orphan(tmp_path)
            if end_us is None:  # not one complete event: nothing to keep
                tmp_path.unlink()
                continue
            final = publish_closed_file(
                tmp_path, profiler_output_dir, end_us, match["node_id"], match["suffix"]
            )
        except OSError as exc:
            logger.warning("Could not recover the timeline file %s: %s", tmp_path, exc)
            continue
        logger.info("Recovered %s, left open by a process that died, as %s", tmp_path, final)
        recovered.append(final)
    return recovered


def _finish_orphan(tmp_path: Path) -> int | None:
    """Cut a dead writer's file after its last complete record and close the array.

    :returns: the end of its last event (µs), or ``None`` when it holds no event.
    """
    data = tmp_path.read_bytes()
    if not data.startswith(b"[\n"):
        return None
    start_us: float | None = None
    end_us: float | None = None
    position = 2  # where the current line starts, after "[\n"
    complete_end = 2  # where the last complete record ends (before its ",")
    for line in data[2:].split(b"\n"):
        text = line.removesuffix(b",")
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            break  # the torn tail
        if not isinstance(record, dict):
            break
        args = record.get("args") or {}
        if start_us is None:
            start_us = args.get("start_time_since_epoch_in_micros")
            if not isinstance(start_us, (int, float)):
                return None
        elif record.get("ph") != "M" and isinstance(record.get("ts"), (int, float)):
            event_end_us = start_us + record["ts"] + (record.get("dur") or 0)
            end_us = event_end_us if end_us is None else max(end_us, event_end_us)
        complete_end = position + len(text)
        position += len(line) + 1
    if end_us is None:
        return None
    with open(tmp_path, "r+b") as file:
        file.truncate(complete_end)
        file.seek(0, os.SEEK_END)
        file.write(b"\n]\n")
        file.flush()
        os.fsync(file.fileno())
    return int(end_us)


def pid_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: running
    return True


def publish_closed_file(
    tmp_path: Path, output_dir: str | Path, end_us: int, node_id: str, suffix: str
) -> Path:
    """Move a finished file to its pevents name, never overwriting one (taken: the next µs).

    :raises OSError: when no name is free or the file cannot be moved.
    """
    for attempt in range(_NAME_ATTEMPTS):
        final = pevents_file_path(output_dir, end_us + attempt, node_id, suffix)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp_path, final)  # fails if the name is taken
        except FileExistsError:
            continue
        except OSError:  # e.g. a file system without hard links: check, then rename
            if final.exists():
                continue
            os.replace(tmp_path, final)
            return final
        try:
            tmp_path.unlink()
        except OSError:
            logger.debug("could not remove %s after publishing it", tmp_path, exc_info=True)
        return final
    raise FileExistsError(f"no free pevents name near {end_us} µs for {tmp_path}")

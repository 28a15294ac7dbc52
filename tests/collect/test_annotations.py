"""Annotations: nested, threaded, as context manager, decorator or begin/end handles."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.collect.torch.torchjob import read_events

import stepscope
from stepscope.collect.session import Session, get_active_session
from stepscope.config import FrameworkProfile, ProfilerConfig


def _session(tmp_path: Path) -> Session:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    return Session(config, tmp_path / "job" / "profiler-output")


def test_nested_annotations_are_written_nested(tmp_path: Path) -> None:
    session = _session(tmp_path).start()
    try:

        @stepscope.annotate("decorated")
        def work() -> int:
            with stepscope.annotate("inner"):
                return 42

        outer = stepscope.annotation_begin("outer")
        assert work() == 42
        with stepscope.annotate("second"):
            pass
        stepscope.annotation_end(outer)
        stepscope.annotation_end(outer)  # closing twice records once
    finally:
        session.stop()
    events = {e["name"]: e for e in read_events(tmp_path / "job") if e["phase"] == "Annotation"}
    assert sorted(events) == ["decorated", "inner", "outer", "second"]

    def within(inner: str, outer: str) -> bool:
        a, b = events[inner], events[outer]
        return b["start_us"] <= a["start_us"] <= a["end_us"] <= b["end_us"]

    assert within("inner", "decorated") and within("decorated", "outer")
    assert (
        within("second", "outer") and events["decorated"]["end_us"] <= events["second"]["start_us"]
    )
    assert {e["args"]["tid"] for e in events.values()} == {threading.get_ident()}


def test_a_decorated_coroutine_function_is_annotated_while_it_is_awaited(
    tmp_path: Path,
) -> None:
    @stepscope.annotate("fetch")
    async def fetch(n: int) -> int:
        await asyncio.sleep(0.05)
        return n + 1

    assert inspect.iscoroutinefunction(fetch)
    session = _session(tmp_path).start()
    try:
        assert asyncio.run(fetch(1)) == 2
    finally:
        session.stop()
    (event,) = [e for e in read_events(tmp_path / "job") if e["phase"] == "Annotation"]
    assert event["name"] == "fetch" and event["end_us"] - event["start_us"] >= 50_000


def _annotations_from_threads(tmp_path: Path, *targets: Callable[[], None]) -> list[Any]:
    """Run each target on a thread of its own in a session; the annotations it wrote."""
    session = _session(tmp_path).start()
    try:
        threads = [threading.Thread(target=target) for target in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        session.stop()
    return [e for e in read_events(tmp_path / "job") if e["phase"] == "Annotation"]


def test_annotations_from_many_threads_are_all_kept(tmp_path: Path) -> None:
    all_started = threading.Barrier(4)  # four live threads: four distinct thread ids

    def worker(n: int) -> None:
        all_started.wait()
        for i in range(50):
            with stepscope.annotate(f"t{n}"), stepscope.annotate(f"t{n}.{i}"):
                pass
        all_started.wait()

    events = _annotations_from_threads(tmp_path, *(functools.partial(worker, n) for n in range(4)))
    assert len(events) == 4 * 50 * 2
    assert len({e["args"]["tid"] for e in events}) == 4


def test_one_annotate_object_shared_by_threads_gives_each_thread_its_own_span(
    tmp_path: Path,
) -> None:
    shared = stepscope.annotate("shared")  # one module-level object, entered by two threads
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with stepscope.annotate("first"), shared:
            first_in.set()
            second_in.wait()
        first_out.set()  # it leaves while the second thread is still inside

    def second() -> None:
        first_in.wait()
        with stepscope.annotate("second"), shared:
            second_in.set()
            first_out.wait()

    events = _annotations_from_threads(tmp_path, first, second)
    owners = {e["name"]: e for e in events if e["name"] != "shared"}
    shared_spans = [e for e in events if e["name"] == "shared"]
    assert len(shared_spans) == 2
    for span in shared_spans:
        owner = next(o for o in owners.values() if o["args"]["tid"] == span["args"]["tid"])
        assert owner["start_us"] <= span["start_us"] <= span["end_us"] <= owner["end_us"]


def test_outside_a_session_annotations_do_nothing() -> None:
    assert get_active_session() is None
    handle = stepscope.annotation_begin("nothing")
    assert handle is None
    stepscope.annotation_end(handle)
    with stepscope.annotate("nothing"):
        pass


def test_ending_something_that_is_not_a_handle_says_what_it_takes(tmp_path: Path) -> None:
    session = _session(tmp_path).start()
    try:
        with pytest.raises(TypeError, match=r"the handle that annotation_begin\(\) returned.*int"):
            stepscope.annotation_end(123)  # type: ignore[arg-type]
    finally:
        session.stop()
    with pytest.raises(TypeError, match=r"annotation_begin\(\).*str"):
        stepscope.annotation_end("step")  # type: ignore[arg-type]


def test_annotating_does_not_import_torch() -> None:
    code = (
        "import sys, stepscope\n"
        "h = stepscope.annotation_begin('a')\n"
        "with stepscope.annotate('b'):\n    pass\n"
        "stepscope.annotation_end(h)\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_an_annotation_named_with_undecodable_bytes_is_recorded_and_so_is_what_follows(
    tmp_path: Path,
) -> None:
    # os.fsdecode makes a lone surrogate of a file name's undecodable byte; orjson refused it
    # and the timeline writer stopped: every later event of the job was dropped
    session = _session(tmp_path).start()
    try:
        for _ in range(3):
            for name in ("before", os.fsdecode(b"data/\xff.bin"), "after"):
                with stepscope.annotate(name):
                    pass
    finally:
        session.stop()
    names = [e["name"] for e in read_events(tmp_path / "job") if e["phase"] == "Annotation"]
    assert names == ["before", "data/\ufffd.bin", "after"] * 3

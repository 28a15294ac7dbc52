"""The profiling session: one at a time, explicit steps and modes, the rank file, profile()."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.collect.torch.torchjob import read_events, steps

import stepscope
from stepscope.collect.explicit import profile_again
from stepscope.collect.rank_file import rank_from_env
from stepscope.collect.session import Session, get_active_session
from stepscope.collect.torch import is_instrumented
from stepscope.config import FrameworkProfile, ProfilerConfig
from stepscope.errors import ConfigError, SessionError
from stepscope.store import open_job
from stepscope.store.timeline_files import pid_running


def _config() -> ProfilerConfig:
    return ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=10_000, num_steps=1))


def test_only_one_session_runs_at_a_time(tmp_path: Path) -> None:
    first = Session(_config(), tmp_path / "a").start()
    try:
        with pytest.raises(SessionError, match="already running"):
            Session(_config(), tmp_path / "b").start()
    finally:
        first.stop()
    assert get_active_session() is None


def test_explicit_steps_and_modes(tmp_path: Path) -> None:
    session = Session(_config(), tmp_path / "job" / "profiler-output").start()
    try:
        for _ in range(3):
            with stepscope.step("train"):
                pass
        with stepscope.step("PREDICT") as number:
            assert number == 3
        with pytest.raises(ConfigError, match="step.mode must be one of TRAIN, EVAL"):
            with stepscope.step("testing"):
                pass
    finally:
        session.stop()
    events = read_events(tmp_path / "job")
    assert [e["args"]["step_num"] for e in steps(events, "TRAIN")] == ["0", "1", "2"]
    assert [e["args"]["step_num"] for e in steps(events, "PREDICT")] == ["0"]
    rank = json.loads((tmp_path / "job/profiler-output/framework/ranks/0-algo-1.json").read_text())
    assert rank["rank"] == 0 and rank["node_id"] == "0-algo-1"
    assert rank["clock_offset_us"] == 0.0 and rank["world_size"] == 1


def test_a_bare_step_call_marks_a_boundary(tmp_path: Path) -> None:
    # ``stepscope.step()`` written as a call, as ``torch.profiler``'s ``step()`` is, did nothing:
    # it only worked in a ``with``, so a script that called it got no steps and no warning.
    session = Session(_config(), tmp_path / "job" / "profiler-output").start()
    try:
        for _ in range(3):
            assert stepscope.step().number == session.step  # the step begun here
            time.sleep(0.01)
        stepscope.step("EVAL")
        time.sleep(0.01)
        with stepscope.step("TRAIN") as number:  # a with-step ends at its block's end
            assert number == 4
            time.sleep(0.01)
    finally:
        session.stop()
    events = read_events(tmp_path / "job")
    train = steps(events, "TRAIN")
    assert [e["args"]["step_num"] for e in train] == ["0", "1", "2", "3"]
    assert [e["args"]["step_num"] for e in steps(events, "EVAL")] == ["0"]
    # each bare call ends the step before it: the steps follow each other
    ordered = sorted(train + steps(events, "EVAL"), key=lambda e: e["start_us"])
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert before["end_us"] <= after["start_us"] + 1
    assert all(e["end_us"] - e["start_us"] >= 10_000 for e in ordered)


def test_profile_instruments_torch_and_set_mode_predicts(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 2)
    with stepscope.profile(_config(), job_dir=tmp_path / "job") as session:
        assert is_instrumented() and get_active_session() is session
        with torch.no_grad():
            model(torch.randn(3, 4))
            stepscope.set_mode("predict")
            model(torch.randn(3, 4))
            model(torch.randn(3, 4))
            stepscope.set_mode(None)
    assert get_active_session() is None and not is_instrumented()
    events = read_events(tmp_path / "job")
    assert len(steps(events, "EVAL")) == 1
    assert [e["args"]["step_num"] for e in steps(events, "PREDICT")] == ["0", "1"]


def test_profile_with_a_disabled_profiler_collects_nothing(tmp_path: Path) -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(), disable_profiler=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with stepscope.profile(config, job_dir=tmp_path / "job") as session:
        assert session is None and get_active_session() is None and not is_instrumented()
        for _ in range(3):
            with stepscope.step("TRAIN"), stepscope.annotate("forward"):
                optimizer.zero_grad()
                model(torch.randn(2, 4)).sum().backward()
                optimizer.step()
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("job_dir", [5, ""])
def test_profile_names_a_job_dir_that_is_not_a_path(job_dir: object) -> None:
    with pytest.raises(ConfigError, match="profile.job_dir .*a non-empty path string or None"):
        with stepscope.profile(job_dir=job_dir):  # type: ignore[arg-type]
            pass
    assert get_active_session() is None


def test_a_second_run_into_the_same_job_folder_is_told_it_adds_to_the_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = torch.nn.Linear(4, 2)
    with stepscope.profile(_config(), job_dir=tmp_path / "job"):
        model(torch.randn(3, 4))
    assert "already holds a run" not in caplog.text
    with stepscope.profile(_config(), job_dir=tmp_path / "job"):  # the notebook cell, again
        model(torch.randn(3, 4))
    assert "already holds a run of 0-algo-1" in caplog.text
    caplog.clear()
    with stepscope.profile(_config(), job_dir=tmp_path / "other"):
        model(torch.randn(3, 4))
    assert "already holds a run" not in caplog.text


def test_threads_that_each_enter_profile_share_one_session_until_the_last_block_ends(
    tmp_path: Path,
) -> None:
    # Two training threads entering profile() at once each started a session, and the second
    # start raised SessionError into the training code; a block that reused another thread's
    # session was stopped with that thread's block, its later steps silently unrecorded.
    both_in = threading.Barrier(2, timeout=60)
    first_left = threading.Event()
    failures: list[BaseException] = []

    def train(steps: int, last: bool) -> None:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        try:
            both_in.wait()
            with stepscope.profile(_config(), job_dir=tmp_path / "job"):
                both_in.wait()
                if last:
                    first_left.wait(60)
                for _ in range(steps):
                    with stepscope.step("TRAIN"):
                        optimizer.zero_grad()
                        model(torch.randn(2, 4)).sum().backward()
                        optimizer.step()
        except BaseException as exc:  # noqa: BLE001 - the test reports what reached the thread
            failures.append(exc)
        finally:
            if not last:
                first_left.set()

    threads = [threading.Thread(target=train, args=(n, n == 3)) for n in (2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert get_active_session() is None and not is_instrumented()
    assert len(steps(read_events(tmp_path / "job"))) == 5
    assert open_job(tmp_path / "job").metadata["status"] == "Completed"


def test_a_profiled_job_reads_as_running_until_its_block_ends_and_as_ended_after(
    tmp_path: Path,
) -> None:
    # Nothing marked the end of a job that profile() wrote: it read as "Running" forever.
    job = tmp_path / "job"
    with stepscope.profile(_config(), job_dir=job) as session:
        with stepscope.step():
            torch.nn.Linear(4, 2)(torch.randn(3, 4))
        assert open_job(job).metadata["status"] == "Running"
    assert open_job(job).metadata["status"] == "Completed"
    assert session is not None
    with profile_again(session):  # a Lightning validate() after fit(): the job runs again
        assert open_job(job).metadata["status"] == "Running"
    assert open_job(job).metadata["status"] == "Completed"


def test_a_script_that_changes_its_working_directory_keeps_one_job_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hydra, for one, runs a script in a folder of its own: a relative job folder is the one
    # named when profiling started
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    model = torch.nn.Linear(4, 2)
    with stepscope.profile(_config(), job_dir="job"):
        with torch.no_grad():
            model(torch.randn(3, 4))
            monkeypatch.chdir(tmp_path / "elsewhere")
            model(torch.randn(3, 4))
    assert [e["args"]["step_num"] for e in steps(read_events(tmp_path / "job"), "EVAL")] == [
        "0",
        "1",
    ]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _monitor_pids(profiler_output: Path) -> list[int]:
    log = profiler_output / "monitor-algo-1.log"
    text = log.read_text() if log.exists() else ""
    return [int(pid) for pid in re.findall(r"monitor of algo-1 started: pid (\d+)", text)]


def test_profile_samples_the_system_metrics_of_the_node_until_the_block_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ProfilerConfig(
        system_monitor_interval_millis=100,
        framework_profile_params=FrameworkProfile(start_step=10_000, num_steps=1),
    )
    output = tmp_path / "job" / "profiler-output"
    with stepscope.profile(config, job_dir=tmp_path / "job"):
        deadline = time.monotonic() + 60
        while not list(output.glob("system/incremental/*/*.algo-1.json")):
            assert time.monotonic() < deadline, "no system metrics were written"
            time.sleep(0.2)
    (pid,) = _monitor_pids(output)  # one monitor, and it stopped with the block
    assert not pid_running(pid)
    assert {"cpu", "memory"} <= _system_record_types(output)
    # a node's other ranks leave the monitor to its first local rank
    monkeypatch.setenv("LOCAL_RANK", "1")
    with stepscope.profile(config, job_dir=tmp_path / "second"):
        pass
    assert not (tmp_path / "second" / "profiler-output" / "monitor-algo-1.log").exists()


def _system_record_types(output: Path) -> set[str]:
    """The ``Type`` of every system record the node's monitor wrote into ``output``."""
    return {
        json.loads(line)["Type"]
        for path in output.glob("system/incremental/*/*.algo-1.json")
        for line in path.read_text().splitlines()
    }


def test_a_block_shorter_than_the_monitors_start_up_still_has_its_system_metrics(
    tmp_path: Path,
) -> None:
    # the monitor was sent SIGTERM before it had installed its handler or primed its counters:
    # it died, and the job's system folder held only the job's end marker
    with stepscope.profile(job_dir=tmp_path / "warm"):
        pass  # what a first block pays once (instrumenting torch) is not this block's
    output = tmp_path / "job" / "profiler-output"
    with stepscope.profile(job_dir=tmp_path / "job"):
        torch.randn(64, 64) @ torch.randn(64, 64)
    (pid,) = _monitor_pids(output)
    assert not pid_running(pid)
    assert {"cpu", "memory"} <= _system_record_types(output)


def test_rank_and_node_come_from_torchrun_variables() -> None:
    found = rank_from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1"})
    assert found == {"node": "algo-2", "rank": 3, "local_rank": 1, "world_size": 4}
    assert rank_from_env({"STEPSCOPE_NODE": "algo-1"})["node"] == "algo-1"


def _watching_its_file(config: ProfilerConfig, tmp_path: Path) -> tuple[Session, Path]:
    """A started session that watches its configuration file, as a rank of a launched job does
    (what `stepscope update` rewrites), and that file."""
    config_path = tmp_path / "profiler-config.json"
    config.to_file(config_path)
    return Session(config, tmp_path / "out", config_path=config_path).start(), config_path


def _rewritten(config_path: Path, config: ProfilerConfig) -> None:
    """Write ``config`` to the file a session watches, and wait until it may be read: the file
    is checked at most once a second, at a step boundary."""
    config.to_file(config_path)
    time.sleep(1.1)


def _active_per_step(session: Session, count: int, pause_s: float = 0.0) -> list[set[str]]:
    seen = []
    for _ in range(count):
        with stepscope.step("TRAIN"):
            seen.append({option for option, on in session.active.items() if on})
        time.sleep(pause_s)
    return seen


def test_a_changed_config_file_applies_from_the_next_step(tmp_path: Path) -> None:
    from stepscope.config import DataloaderProfilingConfig

    session, config_path = _watching_its_file(_config(), tmp_path)
    try:
        with stepscope.step("TRAIN"):
            pass
        assert not session.active["dataloader"]
        later = DataloaderProfilingConfig(start_step=3, num_steps=2)
        framework = FrameworkProfile(dataloader_profiling_config=later)
        _rewritten(config_path, ProfilerConfig(framework_profile_params=framework))
        seen = ["dataloader" in active for active in _active_per_step(session, 5)]
    finally:
        session.stop()
    assert seen == [False, False, True, True, False]  # steps 1-5: the new range is steps 3-4


@pytest.mark.parametrize(
    "switched_off",
    [ProfilerConfig(), ProfilerConfig(disable_profiler=True)],
    ids=["every-option-off", "profiler-disabled"],
)
def test_a_config_file_that_turns_profiling_off_applies_from_the_next_step(
    tmp_path: Path, switched_off: ProfilerConfig
) -> None:
    # what `stepscope update <job> --python off` writes when Python profiling was the last option
    from stepscope.config import PythonProfilingConfig

    python = PythonProfilingConfig(start_step=0, num_steps=1000)
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(python_profiling_config=python)
    )
    session, config_path = _watching_its_file(config, tmp_path)
    try:
        with stepscope.step("TRAIN"):
            assert session.active["python"]
        _rewritten(config_path, switched_off)
        seen = ["python" in active for active in _active_per_step(session, 3)]
    finally:
        session.stop()
    # the file is read at a step's end: the step under way then is the last one profiled
    assert seen == [True, False, False]


def test_a_time_range_that_ran_does_not_restart_when_another_option_changes(
    tmp_path: Path,
) -> None:
    # `stepscope update <job> --detailed 1000:1` rewrites every option, Python's unchanged
    from stepscope.config import DetailedProfilingConfig, PythonProfilingConfig

    python = PythonProfilingConfig(duration=0.5)  # from the first check on, for half a second
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(python_profiling_config=python)
    )
    session, config_path = _watching_its_file(config, tmp_path)
    try:
        seen = []
        while len(seen) < 100 and (not seen or seen[-1]):
            with stepscope.step("TRAIN"):
                seen.append(session.active["python"])
                time.sleep(0.05)
        assert seen[0] and not seen[-1], "the half second of Python profiling ran and ended"
        detailed = DetailedProfilingConfig(start_step=1000, num_steps=1)
        framework = FrameworkProfile(
            python_profiling_config=python, detailed_profiling_config=detailed
        )
        _rewritten(config_path, ProfilerConfig(framework_profile_params=framework))
        later = ["python" in active for active in _active_per_step(session, 4)]
        assert session.range_for("detailed") is not None
    finally:
        session.stop()
    assert later == [False, False, False, False]


class _RecordingWriter:
    """Keeps the batches a session hands over, as a timeline writer would queue them."""

    made: list[_RecordingWriter] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.batches: list[list[Any]] = []
        _RecordingWriter.made.append(self)

    def write_events(self, events: list[Any]) -> int:
        self.batches.append(list(events))
        return len(events)

    def close(self) -> None:
        pass


def test_a_batch_of_events_is_handed_over_once_the_queue_holds_its_bound(tmp_path: Path) -> None:
    from stepscope.collect.events import LATER_MAX_EVENTS
    from stepscope.store.timeline_writer import TimelineEvent

    _RecordingWriter.made = []
    session = Session(_config(), tmp_path / "out", writer_factory=_RecordingWriter).start()
    try:
        session.write_later("Forward", "Net", 1.0, 5.0, {"step_num": "0"})
        layers: list[TimelineEvent] = [
            (f"layer{i}", "Forward-SubModuleInternal", 2.0 + i, 1.0, {"step_num": "0"}, "X")
            for i in range(LATER_MAX_EVENTS)
        ]
        session.write_batch_later(layers)
        # no step ended and the session runs on: the queue's bound alone handed them over
        [writer] = _RecordingWriter.made
        assert [len(batch) for batch in writer.batches] == [LATER_MAX_EVENTS + 1]
        session.write_later("Forward", "Net", 2000.0, 5.0, {"step_num": "1"})
        assert len(writer.batches) == 1  # one event waits for the next burst
    finally:
        session.stop()
    names = [event[0] for batch in writer.batches for event in batch]
    assert names == ["Net", *(f"layer{i}" for i in range(LATER_MAX_EVENTS)), "Net"]


def test_each_option_is_active_on_exactly_its_own_steps(tmp_path: Path) -> None:
    from stepscope.config import (
        DataloaderProfilingConfig,
        DetailedProfilingConfig,
        PythonProfilingConfig,
    )

    framework = FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=3),
        dataloader_profiling_config=DataloaderProfilingConfig(start_step=4, num_steps=1),
        python_profiling_config=PythonProfilingConfig(start_step=0, num_steps=2),
    )
    config = ProfilerConfig(framework_profile_params=framework)
    session = Session(config, tmp_path / "out").start()
    try:
        seen = _active_per_step(session, 7)
    finally:
        session.stop()
    assert seen == [
        {"python"},
        {"python"},
        {"detailed"},
        {"detailed"},
        {"detailed", "dataloader"},
        set(),
        set(),
    ]


def test_a_time_range_ends_between_steps_whatever_the_step_ranges_say(tmp_path: Path) -> None:
    from stepscope.config import DataloaderProfilingConfig, DetailedProfilingConfig

    framework = FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=100, num_steps=1),
        dataloader_profiling_config=DataloaderProfilingConfig(
            start_unix_time=time.time(), duration=2.0
        ),
    )
    session = Session(ProfilerConfig(framework_profile_params=framework), tmp_path / "out").start()
    try:
        seen = _active_per_step(session, 2, pause_s=2.5)
    finally:
        session.stop()
    assert seen == [{"dataloader"}, set()]

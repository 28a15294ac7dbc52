"""Python-profiling and detailed-profiling windows cover exactly the configured steps."""

from __future__ import annotations

import gzip
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import (
    TRAIN_SCRIPT,
    losses,
    profiled_env,
    read_events,
    run_script,
    steps,
)

from stepscope.config import (
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfilingConfig,
    cProfileTimer,
)
from stepscope.store.layout import parse_python_stats_folder


def test_cprofile_windows_for_exactly_the_configured_steps(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=2, num_steps=3, cprofile_timer=cProfileTimer.DEFAULT
            )
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "7")
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    windows = {}
    for folder in root.iterdir():
        bounds = parse_python_stats_folder(folder.name)
        assert bounds is not None, folder.name
        windows[bounds] = folder
    step_windows = sorted(
        (start.step, start, end) for start, end in windows if start.mode == "train"
    )
    assert [step for step, _, _ in step_windows] == [2, 3, 4]
    train = {int(e["args"]["step_num"]): e for e in steps(read_events(job_dir))}
    for step, start, end in step_windows:
        assert (start.phase, end.phase, end.step, end.mode) == (
            "stepstart",
            "stepend",
            step,
            "train",
        )
        # the window is the step: it opens when the previous step ends, closes when this one does
        assert abs(start.time_us - train[step]["start_us"]) < 50_000
        assert abs(end.time_us - train[step]["end_us"]) < 50_000
    modes = sorted(start.mode for start, _ in windows)
    assert modes == ["posthookclose", "prestepzero", "train", "train", "train"]
    for folder in windows.values():
        stats = pstats.Stats(str(folder / "python_stats"))
        assert stats.total_calls > 0
    # the step's own code is in its profile: the optimizer step ran in it
    step_stats = pstats.Stats(
        str(windows[(step_windows[0][1], step_windows[0][2])] / "python_stats")
    )
    assert any(func[2] == "step" and "optim" in func[0] for func in step_stats.stats)


def test_the_first_steps_window_holds_its_data_loading_as_later_steps_do(tmp_path: Path) -> None:
    # the pre-step-zero window ran on to the first step's forward, so the first batch's loading
    # was in it rather than in the first step's window, where each later step has its own
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(start_step=0, num_steps=2)
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "3")
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    items_loaded = {}
    bounds = {}
    for folder in root.iterdir():
        start, end = parse_python_stats_folder(folder.name) or pytest.fail(folder.name)
        window = start.mode if start.step is None else start.step
        stats = pstats.Stats(str(folder / "python_stats")).stats  # type: ignore[attr-defined]
        items_loaded[window] = sum(
            calls[1]
            for (path, _, name), calls in stats.items()
            if name == "__getitem__" and path.endswith("train.py")
        )
        bounds[window] = (start, end)
    # a batch is 4 items, each window's own
    assert items_loaded == {"prestepzero": 0, 0: 4, 1: 4, "posthookclose": 0}
    step_0 = steps(read_events(job_dir))[0]
    assert bounds["prestepzero"][1].step == 0
    assert bounds["prestepzero"][1].time_us <= bounds[0][0].time_us
    # the window opens where the step starts: where its data-loader loop began
    assert abs(bounds[0][0].time_us - step_0["start_us"]) < 50_000


def test_the_default_timer_cycles_wall_cpu_and_off_cpu_time(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=1, num_steps=3, cprofile_timer=cProfileTimer.DEFAULT
            )
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "4", "--sleep-s", "0.2")
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    slept = {}
    for folder in root.iterdir():
        start, _ = parse_python_stats_folder(folder.name) or (None, None)
        if start is not None and start.mode == "train":
            stats = pstats.Stats(str(folder / "python_stats")).stats
            slept[start.step] = sum(v[2] for k, v in stats.items() if "sleep" in k[2])
    # step 1 wall time, step 2 CPU time, step 3 off-CPU time: a sleep costs wall and off-CPU
    # time (at least the 0.2 s asked for), and next to no CPU time
    assert sorted(slept) == [1, 2, 3]
    assert slept[1] >= 0.2 and slept[3] >= 0.2
    assert slept[2] < slept[3] / 4


CTRL_C_IN_A_PROFILED_STEP = """
import _thread, threading, time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train_step():
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()

def work():
    return sum(abs(i) for i in range(20))

train_step()  # step 0; step 1, profiled, runs until its last line
heard = 0
for attempt in range(10):
    threading.Timer(0.02, _thread.interrupt_main).start()  # Ctrl-C, 20 ms from now
    deadline = time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            work()
        time.sleep(0.2)  # an interrupt never heard
    except KeyboardInterrupt:
        heard += 1
print("heard", heard)
train_step()
"""


@pytest.mark.parametrize("timer", [cProfileTimer.TOTAL_TIME, cProfileTimer.OFF_CPU_TIME])
def test_ctrl_c_inside_a_profiled_step_reaches_the_script(
    tmp_path: Path, timer: cProfileTimer
) -> None:
    # cProfile calls its timer at every call and return, and drops what the timer raises:
    # a Ctrl-C that lands in the timer must still stop the script
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=1, num_steps=1, cprofile_timer=timer
            )
        )
    )
    job_dir, result = run_script(tmp_path, CTRL_C_IN_A_PROFILED_STEP, config)
    assert result.stdout.split() == ["heard", "10"], result.stderr
    assert "KeyboardInterrupt" not in result.stderr
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    profiled = [parse_python_stats_folder(folder.name) for folder in root.iterdir()]
    assert 1 in [start.step for start, _ in filter(None, profiled) if start.mode == "train"]


#: put first in a script: files may grow to 12 kB from its start, as on a disk that fills up
NO_ROOM_PAST_12_KB = (
    "import resource, signal\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (12_000, 12_000))\n"
)


@pytest.mark.parametrize("tool", ["cprofile", "pyinstrument"])
def test_a_profile_the_disk_has_no_room_for_leaves_no_half_written_file(
    tmp_path: Path, tool: str
) -> None:
    # the timelines fit in the room left, no profile does
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=1, num_steps=2, python_profiler=tool
            )
        )
    )
    job_dir, result = run_script(
        tmp_path, NO_ROOM_PAST_12_KB + TRAIN_SCRIPT, config, "--steps", "4"
    )
    assert len(losses(result)) == 4  # the job trained on
    assert steps(read_events(job_dir))  # what did fit was written
    written = list((job_dir / "profiler-output").rglob("*python_stats*"))
    for path in written:  # what is there is whole: it reads
        if path.name == "python_stats":
            pstats.Stats(str(path))
        elif path.suffix == ".json":
            json.loads(path.read_text())
        else:
            assert path.read_text().rstrip().endswith("</html>"), path
    # no profile of a step fits, and none was left half written
    assert not [p for p in written if p.name in ("python_stats", "python_stats.html")]


def test_a_detailed_trace_the_disk_has_no_room_for_leaves_no_file_and_says_why(
    tmp_path: Path,
) -> None:
    # torch wrote the trace into a file of its own, left it there half written (as large as the
    # disk let it grow), and stepscope warned that a file torch never made did not exist
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=2)
        )
    )
    job_dir, result = run_script(
        tmp_path, NO_ROOM_PAST_12_KB + TRAIN_SCRIPT, config, "--steps", "4"
    )
    assert len(losses(result)) == 4  # the job trained on
    assert steps(read_events(job_dir))  # what did fit was written
    detailed = job_dir / "profiler-output" / "framework" / "pytorch" / "detailed_profiling"
    assert not [path for path in detailed.rglob("*") if path.is_file()]
    assert "stepscope: cannot write the detailed trace" in result.stderr
    assert "No such file or directory" not in result.stderr


def test_pyinstrument_writes_json_and_html(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=1, num_steps=1, python_profiler="pyinstrument"
            )
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "3")
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "pyinstrument" / "0-algo-1"
    step_folders = [f for f in root.iterdir() if f.name.startswith("train-1-stepstart")]
    assert len(step_folders) == 1
    data = json.loads((step_folders[0] / "python_stats.json").read_text())
    assert "root_frame" in data
    assert "<html" in (step_folders[0] / "python_stats.html").read_text().lower()


def test_pyinstrument_not_installed_is_said_once_and_the_rest_is_profiled(
    tmp_path: Path,
) -> None:
    # each hook that opened a window failed with a MissingDependencyError traceback
    absent = tmp_path / "absent-packages"
    absent.mkdir()
    # chained to by stepscope's sitecustomize: pyinstrument is absent from the script's Python
    (absent / "sitecustomize.py").write_text("import sys\nsys.modules['pyinstrument'] = None\n")
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=1, num_steps=2, python_profiler="pyinstrument"
            )
        )
    )
    env = profiled_env(tmp_path / "job", config)
    env["PYTHONPATH"] += os.pathsep + str(absent)
    (tmp_path / "train.py").write_text(TRAIN_SCRIPT)
    result = subprocess.run(
        [sys.executable, "train.py", "--steps", "4"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "stepscope: no Python profiles: Python profiling with pyinstrument needs the "
        "'pyinstrument' package, which is not installed. Install it with: "
        "pip install 'stepscope[pyinstrument]'\n"
    )
    assert len(losses(result)) == 4
    assert len(steps(read_events(tmp_path / "job"))) == 4


@pytest.mark.parametrize("tool", ["cprofile", "pyinstrument"])
def test_workers_forked_inside_a_python_profile_window_print_nothing(
    tmp_path: Path, tool: str
) -> None:
    # the training loader forks its workers inside the window before step 0, the evaluation
    # loader inside a step's window; a worker takes no profile of its own, and says nothing
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(
                start_step=0, num_steps=10, python_profiler=tool
            )
        )
    )
    job_dir, result = run_script(
        tmp_path, TRAIN_SCRIPT, config, "--steps", "3", "--eval-steps", "2", "--workers", "2"
    )
    assert "Exception ignored" not in result.stderr
    assert "Traceback" not in result.stderr
    root = job_dir / "profiler-output" / "framework" / "pytorch" / tool
    assert [folder.name for folder in root.iterdir()] == ["0-algo-1"]
    modes = sorted(
        bounds[0].mode
        for bounds in map(
            parse_python_stats_folder, (f.name for f in (root / "0-algo-1").iterdir())
        )
        if bounds is not None
    )
    assert modes.count("prestepzero") == 1
    assert modes.count("train") == 3


#: Trains 4 steps on a thread of its own (as Ray Train runs a worker's loop) under
#: ``stepscope.profile()`` with Python profiling of step 2, then prints what holds the main
#: thread's profiler slot once the post-hook-close window is ended.
TRAINING_THREAD_SCRIPT = """
import sys, threading
import torch
import stepscope
from stepscope.collect.torch.python_profiling import end_post_hook_close_window
from stepscope.config import FrameworkProfile, ProfilerConfig, PythonProfilingConfig

def train():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        loss = model(torch.randn(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

python = PythonProfilingConfig(start_step=2, num_steps=1)
config = ProfilerConfig(framework_profile_params=FrameworkProfile(python_profiling_config=python))
with stepscope.profile(config, job_dir="job"):
    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
end_post_hook_close_window()
print("main thread profiler:", sys.getprofile())
"""


def test_steps_on_another_thread_leave_no_profiler_on_the_main_thread(tmp_path: Path) -> None:
    job_dir, result = run_script(tmp_path, TRAINING_THREAD_SCRIPT, None)
    # the pre-step-zero window profiled the main thread; it is off once the session stopped
    assert "main thread profiler: None" in result.stdout, result.stderr
    assert "another Python profiler" not in result.stderr
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    windows = {}
    for folder in root.iterdir():
        bounds = parse_python_stats_folder(folder.name)
        assert bounds is not None, folder.name
        windows[bounds[0].mode] = pstats.Stats(str(folder / "python_stats"))
    assert sorted(windows) == ["posthookclose", "prestepzero", "train"]
    # the step's window profiled the training thread: the optimizer step ran in it
    assert any(f[2] == "step" and "optim" in f[0] for f in windows["train"].stats)


#: Trains 8 steps, calling ``marker`` once per step; with ``--profile-self`` the script takes
#: its own cProfile profile of the loop and prints how many calls of ``marker`` it saw.
SELF_PROFILED_SCRIPT = """
import cProfile, pstats, sys
import torch

def marker():
    return sum(range(10))

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
own = cProfile.Profile() if "--profile-self" in sys.argv else None
if own is not None:
    own.enable()
for _ in range(8):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    marker()
if own is not None:
    own.disable()
    seen = [v[1] for k, v in pstats.Stats(own).stats.items() if k[2] == "marker"]
    print("marker calls seen:", sum(seen))
"""


@pytest.mark.parametrize("how", ["in the script", "python -m cProfile"])
def test_the_users_own_python_profiler_is_left_alone(tmp_path: Path, how: str) -> None:
    # Python has one profiler slot per thread: our windows must not take it from the user's
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(start_step=2, num_steps=3)
        )
    )
    user_stats = tmp_path / "user.prof"
    if how == "in the script":
        _, result = run_script(tmp_path, SELF_PROFILED_SCRIPT, config, "--profile-self")
        assert "marker calls seen: 8" in result.stdout
    else:
        launcher = ("-m", "cProfile", "-o", str(user_stats))
        _, result = run_script(tmp_path, SELF_PROFILED_SCRIPT, config, launcher=launcher)
        stats = pstats.Stats(str(user_stats)).stats
        assert sum(v[1] for k, v in stats.items() if k[2] == "marker") == 8
    assert "another Python profiler runs on this thread" in result.stderr
    root = tmp_path / "job" / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    modes = [
        bounds[0].mode
        for bounds in map(parse_python_stats_folder, (f.name for f in root.iterdir()))
        if bounds is not None
    ]
    assert "train" not in modes  # every step window fell while the user's profiler ran
    if how == "in the script":
        # the window open when the script enabled its profiler ended there, with its stats
        assert "prestepzero" in modes


def test_detailed_trace_covers_exactly_the_configured_steps(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=2)
        )
    )
    # each step in an annotation, as SageMaker Profiler's examples annotate theirs: the window
    # ends while the step's annotation and torch's range around the optimizer step are open
    job_dir, result = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "6", "--annotate")
    assert "Warning" not in result.stderr  # torch warns of ranges it cannot close
    traces = list((job_dir / "profiler-output").rglob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    trace_path = traces[0]
    assert trace_path.parent.name == "000000002"
    assert list(trace_path.parent.iterdir()) == [trace_path]  # no partial file left behind
    assert trace_path.name.startswith("0-algo-1_")
    trace = json.loads(gzip.decompress(trace_path.read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {n for n in names if n and n.startswith("ProfilerStep#")} == {
        "ProfilerStep#2",
        "ProfilerStep#3",
    }
    # annotations made inside the window are in the trace; the others are not
    assert {n for n in names if n and n.startswith("step_0_")} == {"step_0_2", "step_0_3"}
    assert "aten::addmm" in names
    metadata = trace["stepscope"]  # add_metadata_json stores it as a JSON object
    assert (metadata["node_id"], metadata["first_step"], metadata["last_step"]) == (
        "0-algo-1",
        2,
        3,
    )
    _, start_us, end_us = trace_path.name.removesuffix(".pt.trace.json.gz").rsplit("_", 2)
    assert (int(start_us), int(end_us)) == (int(metadata["start_us"]), int(metadata["end_us"]))


def test_a_job_that_ends_before_its_windows_has_no_profile_of_their_steps(
    tmp_path: Path,
) -> None:
    # the windows of step 2 open as step 1 ends; the job ends there, before step 2 began
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=2),
            python_profiling_config=PythonProfilingConfig(start_step=2, num_steps=1),
        )
    )
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "2")
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == ["0", "1"]
    output = job_dir / "profiler-output"
    assert not list(output.rglob("*.pt.trace.json*"))
    windows = [parse_python_stats_folder(f.parent.name) for f in output.rglob("python_stats")]
    assert sorted(start.mode for start, _ in windows) == ["posthookclose", "prestepzero"]


#: Trains 10 steps, each in a ``record_function`` named ``user_step_<i>``, under a
#: ``torch.profiler`` of its own: across the whole loop, or (``--from-step 3``) started at step 3
#: with a schedule (one step waiting, one warming up, two recording, once); prints which steps the
#: script's own trace holds.
SCRIPT_WITH_ITS_OWN_PROFILER = """
import argparse, json
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

parser = argparse.ArgumentParser()
parser.add_argument("--from-step", type=int, default=-1)
args = parser.parse_args()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
own = None
if args.from_step < 0:
    own = profile(activities=[ProfilerActivity.CPU])
    own.start()
for i in range(10):
    if i == args.from_step:
        own = profile(
            activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=1)
        )
        own.start()
    with record_function(f"user_step_{i}"):
        loss = model(torch.randn(2, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if own is not None and args.from_step >= 0:
        own.step()
own.stop()
own.export_chrome_trace("own_trace.json")
events = json.load(open("own_trace.json"))["traceEvents"]
print("own trace:", sorted({e["name"] for e in events if e.get("name", "").startswith("user_step_")}))
"""


def test_the_scripts_own_torch_profiler_comes_first(tmp_path: Path) -> None:
    # Kineto runs one profiler at a time (two at once crashed the script): a window does not
    # open while the script's profiler runs
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=2)
        )
    )
    job_dir, result = run_script(tmp_path, SCRIPT_WITH_ITS_OWN_PROFILER, config)
    expected = sorted(f"user_step_{i}" for i in range(10))
    assert f"own trace: {expected}" in result.stdout
    assert "runs a torch.profiler of its own" in result.stderr
    assert not list((job_dir / "profiler-output").rglob("*.pt.trace.json.gz"))


def test_a_window_gives_way_to_a_torch_profiler_the_script_starts(tmp_path: Path) -> None:
    # the window is open from step 1 when the script's profiler starts warming up at step 4:
    # the window ends there, with its trace, and the script's profiler records steps 5 and 6
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=6)
        )
    )
    job_dir, result = run_script(tmp_path, SCRIPT_WITH_ITS_OWN_PROFILER, config, "--from-step", "3")
    assert "own trace: ['user_step_5', 'user_step_6']" in result.stdout
    assert "runs a torch.profiler of its own" in result.stderr
    traces = list((job_dir / "profiler-output").rglob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    trace = json.loads(gzip.decompress(traces[0].read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {n for n in names if n and n.startswith("user_step_")} == {
        "user_step_1",
        "user_step_2",
        "user_step_3",
    }


@pytest.mark.parametrize("between", ["nothing", "a session on another thread"])
def test_a_new_session_ends_the_previous_sessions_post_hook_close_window(
    tmp_path: Path, between: str
) -> None:
    # A session on another thread between the two (a notebook that profiled on its main thread,
    # then a training thread of its own) cannot stop this thread's profiler: the window went on
    # profiling this thread until the process ended, its stats never written. It now ends at
    # this thread's next call in to any session.
    import sys

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    python_config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(start_step=10**6, num_steps=1)
        )
    )
    first = Session(python_config, tmp_path / "first" / "profiler-output").start()
    instrument(first)
    first.stop()
    assert sys.getprofile() is not None  # its post-hook-close window profiles this thread
    if between == "a session on another thread":

        def train_elsewhere() -> None:
            other = Session(ProfilerConfig(), tmp_path / "other" / "profiler-output").start()
            instrument(other)
            other.stop()

        thread = threading.Thread(target=train_elsewhere)
        thread.start()
        thread.join()
    second = Session(ProfilerConfig(), tmp_path / "second" / "profiler-output").start()
    try:
        instrument(second)
        # the second session's work is no longer profiled into the first one's window
        assert sys.getprofile() is None
    finally:
        second.stop()
    # the stats are written by a thread of their own, after the window ended
    deadline = time.monotonic() + 60
    while len(folders := [p.parent for p in (tmp_path / "first").rglob("python_stats")]) < 2:
        assert time.monotonic() < deadline, f"only {folders} were written"
        time.sleep(0.05)
    kinds = sorted(
        b[0].mode for b in map(parse_python_stats_folder, (f.name for f in folders)) if b
    )
    assert kinds == ["posthookclose", "prestepzero"]
    assert pstats.Stats(str(folders[0] / "python_stats")).total_calls > 0
    assert not list((tmp_path / "second").rglob("python_stats"))


def test_the_post_hook_close_window_ends_on_request_with_its_stats_written(tmp_path: Path) -> None:
    import sys

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument
    from stepscope.collect.torch.python_profiling import end_post_hook_close_window

    python_config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            python_profiling_config=PythonProfilingConfig(start_step=10**6, num_steps=1)
        )
    )
    session = Session(python_config, tmp_path / "profiler-output").start()
    instrument(session)
    session.stop()
    assert sys.getprofile() is not None  # the post-hook-close window profiles this thread
    end_post_hook_close_window()
    assert sys.getprofile() is None  # what the process does next is not profiled
    end_post_hook_close_window()  # no window open: nothing happens
    folders = [p.parent for p in tmp_path.rglob("python_stats")]
    kinds = sorted(
        b[0].mode for b in map(parse_python_stats_folder, (f.name for f in folders)) if b
    )
    assert kinds == ["posthookclose", "prestepzero"]
    ends = [pstats.Stats(str(f / "python_stats")) for f in folders]
    assert all(stats.total_calls > 0 for stats in ends)


#: Two threads train a model each, ``--steps`` steps, taking turns step by step and both stepping
#: the one session (as a script that trains models side by side in threads does); prints each
#: thread's losses.
TWO_TRAINING_THREADS_SCRIPT = """
import argparse, sys, threading
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()
turn = threading.Condition()
whose = [0]

def train(me):
    generator = torch.Generator().manual_seed(me)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.steps):
        with turn:
            turn.wait_for(lambda: whose[0] == me)
            x, y = torch.randn(4, 8, generator=generator), torch.randn(4, 1, generator=generator)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sys.stdout.write(f"loss {me} {loss.item()!r}\\n")  # one write: lines never mix
            whose[0] = 1 - me
            turn.notify_all()

threads = [threading.Thread(target=train, args=(me,)) for me in (0, 1)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_steps_of_several_training_threads_never_crash_a_detailed_window(tmp_path: Path) -> None:
    # a window opened on one thread and moved on or stopped by another crashed the process
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=2, num_steps=3)
        )
    )
    _, result = run_script(tmp_path, TWO_TRAINING_THREADS_SCRIPT, config, "--steps", "12")
    printed = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("loss ")]
    assert sorted(printed) == ["0"] * 12 + ["1"] * 12


def test_a_window_left_open_by_a_training_thread_ends_with_the_session_without_a_crash(
    tmp_path: Path,
) -> None:
    # the loop trains 4 steps on its own thread; the range goes on past them, so the window the
    # thread opened is still open when the session stops on the main thread
    script = TRAINING_THREAD_SCRIPT.replace(
        "python = PythonProfilingConfig(start_step=2, num_steps=1)",
        "from stepscope.config import DetailedProfilingConfig\n"
        "detailed = DetailedProfilingConfig(start_step=2, num_steps=5)",
    ).replace("python_profiling_config=python", "detailed_profiling_config=detailed")
    assert "detailed_profiling_config=detailed" in script
    job_dir, result = run_script(tmp_path, script, None)
    assert "main thread profiler: None" in result.stdout  # the script went on after the block
    assert "still open when the session stopped on another thread" in result.stderr
    assert not list((job_dir / "profiler-output").rglob("*.pt.trace.json*"))


def test_threads_ending_a_step_at_once_open_one_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two training threads that ended a step at the same moment each opened a window: Kineto
    # runs one profiler at a time, and the one stepscope lost track of stayed on, leaking
    import threading

    import torch

    from stepscope.collect.session import Session
    from stepscope.collect.torch.detailed import DetailedProfiler

    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=2)
        )
    )
    session = Session(config, tmp_path / "profiler-output").start()
    detailed = DetailedProfiler(session)
    session.begin_step("TRAIN")
    session.end_step()  # step 1 is in the range: its window opens at step 0's end
    returned = threading.Semaphore(0)
    started: list[object] = []
    start = torch.profiler.profile.start

    def start_once_the_other_thread_is_past(profiler: torch.profiler.profile) -> None:
        # the first window to open starts only once the other thread's step end returned
        started.append(profiler)
        if len(started) == 1:
            returned.acquire(timeout=60)
        start(profiler)

    monkeypatch.setattr(torch.profiler.profile, "start", start_once_the_other_thread_is_past)
    both = threading.Barrier(2)

    def end_step_0() -> None:
        both.wait()
        try:
            detailed.on_step_end(session, 0)
        finally:
            returned.release()

    threads = [threading.Thread(target=end_step_0) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(started) == 1
    finally:
        detailed.on_stop(session)  # the window's thread has ended: it goes without a trace
        session.stop()
    assert not torch._C._autograd._profiler_enabled()  # no profiler left running


#: Trains 3 steps, then runs a ``torch.profiler`` of its own on another thread (as a monitoring
#: thread or a callback's thread does) and prints which operators that profiler's trace holds.
OWN_PROFILER_ON_ANOTHER_THREAD = """
import json, threading
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(2, 4)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

def profile_on_its_own():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as own:
        torch.randn(8, 8) @ torch.randn(8, 8)
    own.export_chrome_trace("own_trace.json")

thread = threading.Thread(target=profile_on_its_own)
thread.start()
thread.join()
events = json.load(open("own_trace.json"))["traceEvents"]
print("own trace has mm:", any(e.get("name") == "aten::mm" for e in events))
"""


def test_a_torch_profiler_the_script_starts_on_another_thread_does_not_crash_it(
    tmp_path: Path,
) -> None:
    # the window, opened by the training thread, was stopped and saved from the thread starting
    # the script's profiler, and saving a profiler stopped off its thread killed the process
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=5)
        )
    )
    job_dir, result = run_script(tmp_path, OWN_PROFILER_ON_ANOTHER_THREAD, config)
    assert "own trace has mm: True" in result.stdout
    assert "torch cannot save it from here, so it has no trace" in result.stderr
    assert not list((job_dir / "profiler-output").rglob("*.pt.trace.json*"))


STEPPED_CLOCK_SCRIPT = """
import sys, time
wall = time.time
time.time = lambda: wall() - 3600.0  # the wall clock steps an hour ahead once profiling started
import stepscope.collect.clock
time.time = wall
import torch
import stepscope
from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

detailed = DetailedProfilingConfig(start_step=2, num_steps=2)
config = ProfilerConfig(framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed))
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(config, job_dir=sys.argv[1]):
    for _ in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_detailed_trace_lines_up_with_its_steps_after_the_wall_clock_stepped(
    tmp_path: Path,
) -> None:
    # torch dates the trace by the wall clock, the job by its own clock: the trace's steps must
    # land on the job's steps, not an hour after them
    from stepscope.store import open_job

    job_dir = tmp_path / "job"
    subprocess.run(
        [sys.executable, "-c", STEPPED_CLOCK_SCRIPT, str(job_dir)], check=True, timeout=240
    )
    job = open_job(job_dir)
    job.refresh()
    starts = dict(
        job.connect()
        .sql(
            "SELECT name, min(start_us) FROM events WHERE name = 'ProfilerStep#2' "
            "OR (name = 'Step:ModeKeys.TRAIN' AND step = 2) GROUP BY name"
        )
        .fetchall()
    )
    assert set(starts) == {"ProfilerStep#2", "Step:ModeKeys.TRAIN"}
    assert abs(starts["ProfilerStep#2"] - starts["Step:ModeKeys.TRAIN"]) < 1e6


QUOTED_NAMES_SCRIPT = """
import sys
import torch
import stepscope
from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

detailed = DetailedProfilingConfig(start_step=1, num_steps=1)
config = ProfilerConfig(framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed))
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(config, job_dir=sys.argv[1]):
    for _ in range(3):
        with torch.profiler.record_function('say "hi"'), stepscope.annotate('a"b'):
            loss = model(torch.randn(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_detailed_trace_with_quotes_in_its_names_is_valid_json(tmp_path: Path) -> None:
    # torch writes event names unescaped: a name with a quote made the saved trace invalid JSON,
    # which TensorBoard, Perfetto and HTA refuse
    job_dir = tmp_path / "job"
    subprocess.run(
        [sys.executable, "-c", QUOTED_NAMES_SCRIPT, str(job_dir)], check=True, timeout=240
    )
    (trace_path,) = (job_dir / "profiler-output").rglob("*.pt.trace.json.gz")
    with gzip.open(trace_path, "rt", encoding="utf-8") as text:
        trace = json.load(text)
    names = [event.get("name") for event in trace["traceEvents"]]
    assert names.count('say "hi"') == 1 and names.count('a"b') == 1
    assert "ProfilerStep#1" in names and "aten::addmm" in names


STEPPED_BACK_SCRIPT = """
import sys, time
wall = time.time
stepped_back = []
time.time = lambda: wall() - (3600.0 if stepped_back else 0.0)
import torch
import stepscope
from stepscope.config import FrameworkProfile, ProfilerConfig, PythonProfilingConfig

python = PythonProfilingConfig(duration=600.0)  # from the first step on, the whole job
config = ProfilerConfig(framework_profile_params=FrameworkProfile(python_profiling_config=python))
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(config, job_dir=sys.argv[1]):
    for step in range(40):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 5:
            stepped_back.append(True)
"""


def test_a_time_range_lasts_its_duration_when_the_wall_clock_steps_back(tmp_path: Path) -> None:
    # NTP steps the wall clock an hour back at step 5 of a range of ten minutes: every step of
    # the job is still in it (it stopped at the step, to start again an hour later)
    job_dir = tmp_path / "job"
    subprocess.run(
        [sys.executable, "-c", STEPPED_BACK_SCRIPT, str(job_dir)], check=True, timeout=240
    )
    root = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    windows = [parse_python_stats_folder(folder.name) for folder in root.iterdir()]
    profiled = {w[0].step for w in windows if w is not None and w[0].phase == "stepstart"}
    assert len(profiled) >= 35, sorted(profiled)


UNDECODABLE_NAME_SCRIPT = """
import os
import torch
import stepscope

model = torch.nn.Linear(4, 1)
for step in range(4):
    with stepscope.annotate(os.fsdecode(b"data/\\xff.bin")):
        with stepscope.annotate("forward"):
            model(torch.randn(2, 4)).sum().backward()
"""


def test_an_annotation_torch_cannot_name_keeps_the_ranges_of_the_window(tmp_path: Path) -> None:
    # torch refused the lone surrogate os.fsdecode makes of an undecodable byte: the guard
    # printed a traceback and disabled the record_function ranges of every later annotation
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(start_step=1, num_steps=2)
        )
    )
    job_dir, result = run_script(tmp_path, UNDECODABLE_NAME_SCRIPT, config)
    assert "Traceback" not in result.stderr
    (trace_path,) = (job_dir / "profiler-output").rglob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace_path.read_bytes()))["traceEvents"]
    ranges = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    assert ranges.count("forward") == 2 and len(ranges) >= 4

"""``stepscope.smprof``: SageMaker Profiler's example script runs with only its import changed."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import run_under_stepscope_run

from stepscope.errors import ConfigError

#: SageMaker Profiler's documented example (annotation_begin/end variant), import changed only
EXAMPLE = """
import torch
import stepscope.smprof as smprof

SMProf = smprof.SMProfiler.instance()
config = smprof.Config()
config.profiler = {
    "EnableCuda": "1",
}
SMProf.configure(config)
SMProf.start_profiling()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,)))
trainloader = torch.utils.data.DataLoader(data, batch_size=4)
for epoch in range(1):
    for i, data in enumerate(trainloader, 0):
        step_annotator = smprof.annotation_begin("step_" + str(i))
        inputs, labels = data
        optimizer.zero_grad()
        forward_annotator = smprof.annotation_begin("Forward")
        outputs = net(inputs)
        smprof.annotation_end(forward_annotator)
        with smprof.annotate("Loss"):
            loss = criterion(outputs, labels)
        backward_annotator = smprof.annotation_begin("Backward")
        loss.backward()
        smprof.annotation_end(backward_annotator)
        optimizer_annotator = smprof.annotation_begin("Optimizer")
        optimizer.step()
        smprof.annotation_end(optimizer_annotator)
        smprof.annotation_end(step_annotator)
SMProf.stop_profiling()
print("done")
"""


def _run_script(script: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``source`` as a plain script in its folder, outside any stepscope job."""
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _names_in_the_one_trace(folder: Path) -> set[str]:
    """The event names of the one Kineto trace under ``folder``."""
    traces = list(folder.rglob("*.pt.trace.json.gz"))
    assert len(traces) == 1, traces
    events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
    return {e.get("name") for e in events}


def test_the_sagemaker_profiler_example_runs_and_records_its_annotations(tmp_path: Path) -> None:
    result = _run_script(tmp_path / "train_with_profiler_demo.py", EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    jobs = list((tmp_path / "stepscope-jobs").iterdir())
    assert len(jobs) == 1
    names = _names_in_the_one_trace(jobs[0])
    assert {"step_0", "step_3", "Forward", "Loss", "Backward", "Optimizer"} <= names
    assert {f"ProfilerStep#{n}" for n in range(4)} <= names


def test_profiler_duration_and_cuda_option_are_checked() -> None:
    from stepscope import smprof

    assert smprof.Profiler().cpu_profiling_duration == 3600
    with pytest.raises(
        ConfigError, match="Profiler.cpu_profiling_duration must be an integer >= 1"
    ):
        smprof.Profiler(cpu_profiling_duration=0)
    config = smprof.Config()
    config.profiler = {"EnableCuda": "maybe"}
    with pytest.raises(ConfigError, match='EnableCuda.*"1", "0", "true" or "false"'):
        smprof.SMProfiler.instance().configure(config)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("profile_params", 3600, "Config.profile_params must be an smprof.Profiler or None"),
        ("profile_params", {"cpu_profiling_duration": 5}, "Config.profile_params must be"),
        ("profiler", None, 'Config.profiler must be a dict of options, such as {"EnableCuda"'),
    ],
)
def test_configure_refuses_a_config_that_start_profiling_would_fail_on(
    field: str, value: object, message: str
) -> None:
    # these passed configure() and raised AttributeError from start_profiling() into the script
    from stepscope import smprof

    config = smprof.Config()
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        smprof.SMProfiler.instance().configure(config)
    assert smprof.SMProfiler.instance().config is not config


def test_importing_smprof_for_annotations_does_not_import_torch() -> None:
    code = "import sys\nimport stepscope.smprof as s\nwith s.annotate('x'):\n    pass\nprint('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


DURATION_EXAMPLE = """
import time
import torch
import stepscope.smprof as smprof

SMProf = smprof.SMProfiler.instance()
SMProf.configure(smprof.Config(profile_params=smprof.Profiler(cpu_profiling_duration=1)))
SMProf.start_profiling()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(2, 4)).sum()
    optimizer.zero_grad()
    loss.backward()
    if step == 0:
        time.sleep(1.2)  # past cpu_profiling_duration: the window closes when this step ends
    optimizer.step()
SMProf.stop_profiling()
"""


JOB_DURATION_EXAMPLE = DURATION_EXAMPLE.replace(
    "SMProf.configure(smprof.Config(profile_params=smprof.Profiler(cpu_profiling_duration=1)))\n",
    "",
).replace(
    "SMProf.start_profiling()",
    "from stepscope import Profiler, ProfilerConfig, profile\n"
    "job = profile(ProfilerConfig(profile_params=Profiler(cpu_profiling_duration=1)))\n"
    "job.__enter__()\n"
    "SMProf.start_profiling()",
)


@pytest.mark.parametrize(
    "source", [DURATION_EXAMPLE, JOB_DURATION_EXAMPLE], ids=["script-config", "job-config"]
)
def test_cpu_profiling_duration_closes_the_window(tmp_path: Path, source: str) -> None:
    result = _run_script(tmp_path / "train.py", source)
    assert result.returncode == 0, result.stderr
    names = _names_in_the_one_trace(tmp_path / "stepscope-jobs")
    assert {n for n in names if n and n.startswith("ProfilerStep#")} == {"ProfilerStep#0"}


TWICE_EXAMPLE = """
import torch
import stepscope.smprof as smprof

SMProf = smprof.SMProfiler.instance()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
SMProf.start_profiling()
for step in range(4):
    if step == 2:
        SMProf.start_profiling()  # again, while profiling
    with smprof.annotate("step_" + str(step)):
        loss = model(torch.randn(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
SMProf.stop_profiling()
SMProf.stop_profiling()  # again, after stopping
print("done")
"""


def test_starting_or_stopping_twice_warns_and_training_goes_on(tmp_path: Path) -> None:
    result = _run_script(tmp_path / "train.py", TWICE_EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert "already profiling" in result.stderr
    # the window opened first goes on to stop_profiling: one trace
    names = _names_in_the_one_trace(tmp_path / "stepscope-jobs")
    assert {f"step_{n}" for n in range(4)} <= names


#: Two threads call ``start_profiling()`` at the same moment; the main thread then stops it.
STARTED_AT_ONCE = """
import threading
import stepscope.smprof as smprof
from stepscope.collect.session import get_active_session

SMProf = smprof.SMProfiler.instance()
both = threading.Barrier(2)

def start():
    both.wait()
    SMProf.start_profiling()

starters = [threading.Thread(target=start) for _ in range(2)]
for starter in starters:
    starter.start()
for starter in starters:
    starter.join()
SMProf.stop_profiling()
print("profiling after the stop:", get_active_session() is not None)
"""


def test_two_threads_starting_at_once_start_one_window(tmp_path: Path) -> None:
    # both threads saw no window, and each started a session: the second start raised into the
    # script, or joined the first's session, which the one stop_profiling() then left running
    result = _run_script(tmp_path / "train.py", STARTED_AT_ONCE)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("already profiling") == 1
    assert result.stdout.strip() == "profiling after the stop: False"
    assert len(list((tmp_path / "stepscope-jobs").iterdir())) == 1


def test_under_stepscope_run_with_sagemaker_profiler_config_the_window_goes_into_the_job(
    tmp_path: Path,
) -> None:
    # SageMaker's launcher configures SageMaker Profiler with profile_params alone. Under
    # `stepscope run` that config profiles no framework, so the ranks have no session, and
    # start_profiling() used to start one of its own in ./stepscope-jobs/<script>-<time>: the
    # run's job folder (its UI, report) held no trace, and the job's duration was ignored.
    source = DURATION_EXAMPLE.replace("SMProf.configure(", "# SMProf.configure(")
    run_under_stepscope_run(
        tmp_path,
        source,
        {"profile_params": {"cpu_profiling_duration": 1}},
        script_name="train_with_profiler_demo.py",
    )
    assert not (tmp_path / "stepscope-jobs").exists()
    names = _names_in_the_one_trace(tmp_path / "job" / "profiler-output")
    assert {n for n in names if n and n.startswith("ProfilerStep#")} == {"ProfilerStep#0"}


WINDOWS_EXAMPLE = """
import torch
import stepscope.smprof as smprof

SMProf = smprof.SMProfiler.instance()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    if step in (0, 3):
        SMProf.start_profiling()
    loss = model(torch.randn(2, 4)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step in (1, 4):
        SMProf.stop_profiling()
print("done")
"""


def test_the_windows_of_one_script_go_into_one_job_with_steps_numbered_on(
    tmp_path: Path,
) -> None:
    # Each start_profiling() outside a session started a job of its own: a job folder per
    # window, or, within one second, the same folder with its steps numbered from 0 again
    # and a warning to "give profile() a new job_dir", a call the script never made. Steps
    # are those the windows saw: the one trained between them is not counted.
    from stepscope.store import open_job

    result = _run_script(tmp_path / "train.py", WINDOWS_EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert "already holds a run" not in result.stderr
    jobs = list((tmp_path / "stepscope-jobs").iterdir())
    assert len(jobs) == 1
    assert len(list(jobs[0].rglob("*.pt.trace.json.gz"))) == 2
    con = open_job(jobs[0], cache_dir=tmp_path / "cache").connect()
    try:
        steps = con.sql(
            "SELECT step FROM events WHERE name = 'Step:ModeKeys.TRAIN' ORDER BY start_us"
        ).fetchall()
    finally:
        con.close()
    assert [step for (step,) in steps] == [0, 1, 2, 3]


#: Trains 5 steps on the thread that calls ``start_profiling()``; after step 1 another thread
#: calls ``stop_profiling()`` (as a timer's callback would). ``--in-session``: inside a
#: ``stepscope.profile()`` block the script entered itself; ``--trainer-ends``: the steps run on a
#: thread that has ended when the main thread stops the window; ``--own-profiler``: right after
#: the stop, another thread runs a ``torch.profiler`` of its own. Prints whether torch's profiler
#: is still on in the main thread once it trained.
OTHER_THREAD_STOPS = """
import json, sys, threading
import torch
import stepscope
import stepscope.smprof as smprof

SMProf = smprof.SMProfiler.instance()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

def train(steps, stop_after):
    SMProf.start_profiling()
    for step in range(steps):
        loss = model(torch.randn(2, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == stop_after:
            stopper = threading.Thread(target=SMProf.stop_profiling)
            stopper.start()
            stopper.join()
            if "--own-profiler" in sys.argv:
                profiling = threading.Thread(target=profile_on_its_own)
                profiling.start()
                profiling.join()

def profile_on_its_own():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as own:
        torch.randn(8, 8) @ torch.randn(8, 8)
    own.export_chrome_trace("own_trace.json")
    events = json.load(open("own_trace.json"))["traceEvents"]
    print("own trace has mm:", any(e.get("name") == "aten::mm" for e in events))

def run():
    if "--trainer-ends" in sys.argv:
        trainer = threading.Thread(target=train, args=(3, -1))
        trainer.start()
        trainer.join()
        SMProf.stop_profiling()
    else:
        train(5, 1)

if "--in-session" in sys.argv:
    with stepscope.profile(job_dir="job"):
        run()
else:
    run()
print("torch profiler on here:", torch._C._autograd._profiler_enabled())
print("done")
"""


def _profiler_steps_of_the_one_trace(folder: Path) -> set[str]:
    return {n for n in _names_in_the_one_trace(folder) if n and n.startswith("ProfilerStep#")}


def test_stop_profiling_on_another_thread_closes_the_window_on_its_own_thread(
    tmp_path: Path,
) -> None:
    # torch's profiler was stopped on the thread that called stop_profiling(), and saving it
    # killed the script (SIGSEGV); the window's thread closes it at its next step end instead
    result = _run_script(tmp_path / "train.py", OTHER_THREAD_STOPS, "--in-session")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == ["torch profiler on here: False", "done"]
    assert _profiler_steps_of_the_one_trace(tmp_path / "job") == {
        "ProfilerStep#0",
        "ProfilerStep#1",
        "ProfilerStep#2",
    }


@pytest.mark.parametrize(
    "args", [(), ("--trainer-ends", "--in-session")], ids=["own-session", "trainer-ended"]
)
def test_a_window_stopped_where_torch_cannot_save_it_is_dropped_with_a_warning(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # the session start_profiling() started stops with stop_profiling(), on the other thread;
    # a window whose thread has ended can no longer be stopped on it: either way the script
    # used to die (SIGSEGV) saving it
    result = _run_script(tmp_path / "train.py", OTHER_THREAD_STOPS, *args)
    assert result.returncode == 0, result.stderr
    assert "on the thread that called start_profiling()" in result.stderr
    assert not list(tmp_path.rglob("*.pt.trace.json*"))
    # the thread that trains on turned torch's profiler off at its next step: it recorded
    # every operator to the end of the script
    assert result.stdout.splitlines()[-2:] == ["torch profiler on here: False", "done"]


def test_a_profiler_started_before_the_training_thread_drops_a_stopped_window_runs(
    tmp_path: Path,
) -> None:
    # the session start_profiling() started stopped on another thread, and before the training
    # thread's next step (where it would turn the window's profiler off) the script's own
    # torch.profiler starts on a third: turning the window off after that crashes torch
    result = _run_script(tmp_path / "train.py", OTHER_THREAD_STOPS, "--own-profiler")
    assert result.returncode == 0, result.stderr
    assert "own trace has mm: True" in result.stdout
    assert "so it stays on in that thread" in result.stderr
    assert result.stdout.splitlines()[-1] == "done"

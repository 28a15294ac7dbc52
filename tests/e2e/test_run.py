"""``stepscope run`` end to end: a real training script in a real child process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from stepscope.errors import ConfigError

TRAIN = textwrap.dedent(
    """
    import argparse, sys, time
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--sleep-s", type=float, default=0.0)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        if step == args.crash_at:
            raise RuntimeError("the training script failed on purpose")
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.sleep_s)
    print("done", flush=True)
    """
)


@pytest.fixture
def train_script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return script


def _stepscope(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepscope", *args],
        capture_output=True,
        text=True,
        timeout=240,
        **kwargs,  # type: ignore[arg-type]
    )


def _job(job_dir: Path) -> dict:
    return json.loads((job_dir / "job.json").read_text())


def test_run_profiles_a_training_script_and_returns_its_exit_code(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "job"
    result = _stepscope(
        "run", "--job-dir", str(job_dir), "--", "python", str(train_script), "--lr", "0.05"
    )
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    job = _job(job_dir)
    assert job["status"] == "Completed"
    assert job["exit_code"] == 0
    assert job["hyperparameters"] == {"lr": 0.05}
    assert job["end_time_us"] >= job["start_time_us"]
    assert job["hardware"]["algo-1"]["cpu_count"] == os.cpu_count()
    output = job_dir / "profiler-output"
    assert (output / "training_job_end.ts").exists()
    system_files = list((output / "system" / "incremental").rglob("*.algo-1.json"))
    assert system_files, "the monitor wrote no system metrics"
    records = [json.loads(line) for f in system_files for line in f.read_text().splitlines()]
    assert {r["Dimension"] for r in records} >= {"CPUUtilization", "I/OWaitPercentage"}
    framework = list((output / "framework" / "pevents").rglob("*_pythontimeline.json"))
    assert framework, "the instrumentation wrote no framework events"
    events = [e for f in framework for e in json.loads(f.read_text())]
    steps = [e for e in events if e.get("name") == "Step:ModeKeys.TRAIN"]
    assert sorted(int(e["args"]["step_num"]) for e in steps) == list(range(30))
    assert job["ranks"]["0"]["node"] == "algo-1"
    assert (job_dir / "rule-output").is_dir()


def test_no_report_leaves_the_job_without_an_html_report(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "job"
    result = _stepscope(
        "run", "--no-report", "--job-dir", str(job_dir), "--", sys.executable, str(train_script)
    )
    assert result.returncode == 0, result.stderr
    assert (job_dir / "rule-output" / "ProfilerReport" / "status.json").exists()
    assert not (job_dir / "rule-output" / "profiler-report.html").exists()
    assert "Report:" not in result.stdout


def test_a_report_that_cannot_be_written_leaves_the_commands_exit_status(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "job"
    (job_dir / "rule-output" / "profiler-report.html").mkdir(parents=True)  # in the report's way
    result = _stepscope("run", "--job-dir", str(job_dir), "--", sys.executable, str(train_script))
    assert result.returncode == 0, result.stderr
    assert "the profiling report could not be written" in result.stderr
    assert "Job Completed (exit code 0)" in result.stderr  # the summary is still printed
    assert _job(job_dir)["status"] == "Completed"


def test_a_job_file_that_cannot_be_rewritten_leaves_the_commands_exit_status(
    tmp_path: Path, train_script: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from stepscope.launcher import launch

    def block_the_job_file(job: Any) -> None:  # as a full disk would at the job's end
        (job.path / "job.json").unlink()
        (job.path / "job.json").mkdir()

    with caplog.at_level(logging.WARNING, logger="stepscope.launcher"):
        job = launch(
            str(train_script),
            job_dir=tmp_path / "job",
            rules=["StepOutlier"],
            report=False,
            on_start=block_the_job_file,
        )
    assert (job.status, job.exit_code) == ("Completed", 0)
    assert any("could not record the job's end" in m for m in caplog.messages)


def test_a_crashing_script_leaves_a_complete_failed_job(tmp_path: Path, train_script: Path) -> None:
    job_dir = tmp_path / "job"
    result = _stepscope(
        "run", "--job-dir", str(job_dir), "--", sys.executable, str(train_script), "--crash-at", "5"
    )
    assert result.returncode == 1
    assert "failed on purpose" in result.stderr
    job = _job(job_dir)
    assert job["status"] == "Failed"
    assert job["exit_code"] == 1
    assert job["end_time_us"] is not None
    assert (job_dir / "profiler-output" / "training_job_end.ts").exists()


@contextlib.contextmanager
def _running(
    job_dir: Path, command: list[str], options: tuple[str, ...] = ()
) -> Iterator[subprocess.Popen[str]]:
    """``stepscope run [options] -- command`` in a session of its own; at the end, whatever is
    left of the job is killed, and the launcher reaped (no zombie or open pipe outlives the
    test)."""
    run = [sys.executable, "-m", "stepscope", "run", *options, "--job-dir", str(job_dir)]
    process = subprocess.Popen(
        [*run, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for pipe in (process.stdout, process.stderr):
            assert pipe is not None
            pipe.close()


def _wait_until(process: subprocess.Popen[str], ready: Callable[[], bool], failure: str) -> None:
    """Wait (up to two minutes) until ``ready()``, while the job runs; when it never comes, the
    failure shows the job's processes and what the launcher printed."""
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, process.communicate()
        if time.monotonic() > deadline:
            tree = [
                str(child.as_dict(["pid", "status", "cmdline"]))
                for child in psutil.Process(process.pid).children(recursive=True)
            ]
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate(timeout=60)
            pytest.fail("\n".join([failure, *tree, stderr]))
        time.sleep(0.2)


def test_ctrl_c_stops_the_job_and_leaves_it_readable(tmp_path: Path, train_script: Path) -> None:
    job_dir = tmp_path / "job"
    command = [sys.executable, str(train_script), "--steps", "100000", "--sleep-s", "0.01"]

    def writing() -> bool:
        return any((job_dir / "profiler-output").rglob("*.algo-1.json"))

    with _running(job_dir, command) as process:
        _wait_until(process, writing, "the job never started writing")
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        process.communicate(timeout=120)
    job = _job(job_dir)
    assert job["status"] == "Stopped"
    assert job["end_time_us"] is not None
    assert (job_dir / "profiler-output" / "training_job_end.ts").exists()


def test_stepscope_update_disable_pauses_the_system_monitor_of_a_running_job(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "job"
    output = job_dir / "profiler-output"
    command = [sys.executable, str(train_script), "--steps", "100000", "--sleep-s", "0.01"]

    def samples() -> int:
        return sum(len(f.read_bytes().splitlines()) for f in output.rglob("*.algo-1.json"))

    with _running(job_dir, command) as process:
        _wait_until(process, lambda: samples() > 0, "the monitor never wrote")
        result = _stepscope("update", str(job_dir), "--disable")
        assert result.returncode == 0, result.stderr
        log = output / "monitor-algo-1.log"
        _wait_until(process, lambda: "paused" in log.read_text(), "the monitor never paused")
        paused_at = samples()
        time.sleep(1.5)  # three of the job's 500 ms ticks
        assert samples() == paused_at
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=120)


#: trains until SIGTERM, then saves a "checkpoint" (argv[1]) and exits 0, as a preempted job does
PREEMPTIBLE = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    import torch

    checkpoint = pathlib.Path(sys.argv[1])

    def save_and_exit(signum, frame):
        checkpoint.write_text("saved")
        sys.exit(0)

    signal.signal(signal.SIGTERM, save_and_exit)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    while True:
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        checkpoint.with_suffix(".training").touch()
        time.sleep(0.01)
    """
)


def test_sigterm_goes_on_to_the_command_and_the_job_ends_stopped(tmp_path: Path) -> None:
    # a scheduler preempting the job signals the launcher: the training script gets the
    # signal, saves its checkpoint and exits, and the job ends Stopped with its report
    script = tmp_path / "preemptible.py"
    script.write_text(PREEMPTIBLE)
    checkpoint = tmp_path / "checkpoint"
    job_dir = tmp_path / "job"
    training = checkpoint.with_suffix(".training")
    with _running(job_dir, [sys.executable, str(script), str(checkpoint)]) as process:
        _wait_until(process, training.exists, "the script never started training")
        process.send_signal(signal.SIGTERM)  # to the launcher alone
        _, stderr = process.communicate(timeout=120)
    assert checkpoint.read_text() == "saved", stderr
    job = _job(job_dir)
    assert job["status"] == "Stopped"
    assert job["exit_code"] == 0
    assert process.returncode == 0
    assert (job_dir / "profiler-output" / "training_job_end.ts").exists()
    assert (job_dir / "rule-output" / "profiler-report.html").exists()


#: trains until SIGINT, SIGTERM or SIGQUIT, then saves a "checkpoint" for two seconds and exits
#: 0, noting each signal and the save in argv[1], as a script that stops gracefully on Ctrl-C does
GRACEFUL = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    import torch

    log = pathlib.Path(sys.argv[1])

    def note(line):
        with log.open("a") as file:
            file.write(line + "\\n")

    stopping = []

    def stop(signum, frame):
        note(signal.Signals(signum).name)
        stopping.append(signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGQUIT, stop)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    note("training")
    while not stopping:
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.01)
    time.sleep(2)
    note("saved")
    """
)

#: runs the rest of its command line on the terminal it is given as standard input, made its
#: controlling terminal (it must lead a session of its own)
_ON_THE_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _type_on_the_terminal(tmp_path: Path, key: bytes) -> list[str]:
    """Run :data:`GRACEFUL` under ``stepscope run`` on a terminal, type ``key`` once it trains,
    and return what the script noted."""
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    log = tmp_path / "signals.txt"
    job_dir = tmp_path / "job"
    controller, terminal = os.openpty()
    run = [sys.executable, "-m", "stepscope", "run", "--no-report", "--job-dir", str(job_dir)]
    process = subprocess.Popen(
        [sys.executable, "-c", _ON_THE_TERMINAL, sys.executable, *run[1:], "--"]
        + [sys.executable, str(script), str(log)],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    printed = bytearray()
    try:
        while not (log.exists() and "training" in log.read_text()):
            assert process.poll() is None, printed.decode(errors="replace")
            if select.select([controller], [], [], 0.2)[0]:
                printed += os.read(controller, 65536)
        os.write(controller, key)
        while process.poll() is None:
            if select.select([controller], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):  # the terminal closed with its last process
                    printed += os.read(controller, 65536)
        process.wait(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        os.close(controller)
    job = _job(job_dir)
    assert (job["status"], job["exit_code"]) == ("Stopped", 0), printed.decode(errors="replace")
    return log.read_text().split()


def test_ctrl_c_typed_in_the_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    # the terminal interrupts its whole foreground process group, the command with it: the
    # launcher's own SIGINT on top of it was a second Ctrl-C ("press Ctrl-C again to quit")
    assert _type_on_the_terminal(tmp_path, b"\x03") == ["training", "SIGINT", "saved"]


def test_ctrl_backslash_typed_in_the_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    # the terminal's SIGQUIT goes to its whole foreground process group: the launcher died of
    # it, leaving the job Running; passed on, the command would get it twice
    assert _type_on_the_terminal(tmp_path, b"\x1c") == ["training", "SIGQUIT", "saved"]


#: notes SIGUSR1 and SIGUSR2 in argv[1] as it gets them, and ends once it has both, as a job
#: that saves a checkpoint when its scheduler asks and trains on does
CHECKPOINT_ON_REQUEST = textwrap.dedent(
    """
    import pathlib, signal, sys, time

    log = pathlib.Path(sys.argv[1])
    got = []

    def note(signum, frame):
        got.append(signal.Signals(signum).name)
        log.write_text(" ".join(got))

    signal.signal(signal.SIGUSR1, note)
    signal.signal(signal.SIGUSR2, note)
    log.write_text("")
    while len(got) < 2:
        time.sleep(0.01)
    """
)


def test_checkpoint_signals_go_on_to_the_command_and_the_job_completes(tmp_path: Path) -> None:
    # Slurm's --signal and other schedulers ask for a checkpoint with SIGUSR1 or SIGUSR2: they
    # killed the launcher (their default action) and left the command running without its job
    script = tmp_path / "checkpointing.py"
    script.write_text(CHECKPOINT_ON_REQUEST)
    log = tmp_path / "signals.txt"
    job_dir = tmp_path / "job"
    with _running(job_dir, [sys.executable, str(script), str(log)]) as process:
        _wait_until(process, log.exists, "the script never started")
        process.send_signal(signal.SIGUSR1)  # to the launcher alone
        _wait_until(process, lambda: log.read_text() == "SIGUSR1", "SIGUSR1 was not passed on")
        process.send_signal(signal.SIGUSR2)
        _, stderr = process.communicate(timeout=120)
    assert log.read_text() == "SIGUSR1 SIGUSR2", stderr
    assert process.returncode == 0, stderr
    assert (_job(job_dir)["status"], _job(job_dir)["exit_code"]) == ("Completed", 0)


#: a rule that takes minutes over its pass once the job in ``SLOW_RULE_JOB`` has ended, and
#: touches ``final-pass`` beside that folder as it begins it
SLOW_FINAL_PASS = textwrap.dedent(
    """
    import os, pathlib, time
    from stepscope.rules import Rule, Verdict

    class SlowFinalPass(Rule):
        description = "Takes minutes over its final pass."

        def scan(self, window):
            pass

        def evaluate(self):
            job = pathlib.Path(os.environ["SLOW_RULE_JOB"])
            if (job / "profiler-output" / "training_job_end.ts").exists():
                (job.parent / "final-pass").touch()
                time.sleep(300)
            return Verdict()
    """
)


def test_ctrl_c_during_the_rules_final_pass_still_records_the_jobs_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a Ctrl-C while the rules made their final pass left job.json Running, without the
    # command's exit code, and stepscope run exited 130 for a command that had succeeded
    (tmp_path / "slowrule.py").write_text(SLOW_FINAL_PASS)
    job_dir = tmp_path / "job"
    monkeypatch.setenv("SLOW_RULE_JOB", str(job_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    options = ("--rule", "slowrule:SlowFinalPass")
    with _running(job_dir, [sys.executable, "-c", "pass"], options) as process:
        _wait_until(process, (tmp_path / "final-pass").exists, "the final pass never began")
        process.send_signal(signal.SIGINT)  # to the launcher alone
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "the rules' final pass and the report are skipped" in stderr
    job = _job(job_dir)
    assert (job["status"], job["exit_code"]) == ("Completed", 0)
    assert (job_dir / "profiler-output" / "training_job_end.ts").exists()


def test_a_checkpoint_signal_after_the_command_ended_leaves_the_job_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slurm's --signal may come once the command has ended, while the rules make their final
    # pass: SIGUSR1's default action killed the launcher, and the job stayed Running
    (tmp_path / "slowrule.py").write_text(SLOW_FINAL_PASS)
    job_dir = tmp_path / "job"
    monkeypatch.setenv("SLOW_RULE_JOB", str(job_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    options = ("--rule", "slowrule:SlowFinalPass")
    with _running(job_dir, [sys.executable, "-c", "pass"], options) as process:
        _wait_until(process, (tmp_path / "final-pass").exists, "the final pass never began")
        process.send_signal(signal.SIGUSR1)
        process.send_signal(signal.SIGINT)  # and no more waiting for the final pass
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert (_job(job_dir)["status"], _job(job_dir)["exit_code"]) == ("Completed", 0)


#: a rule whose engine, as it unpickles the rule, touches ``importing`` in ``STARTING_RULE_DIR``
#: and waits there for ``go``; its pickle outgrows a pipe, so the launcher waits in the engine's
#: start until then
SLOW_TO_START = textwrap.dedent(
    """
    import multiprocessing, os, pathlib, time
    from stepscope.rules import Rule, Verdict

    if multiprocessing.current_process().name == "stepscope-rules":
        here = pathlib.Path(os.environ["STARTING_RULE_DIR"])
        (here / "importing").touch()
        while not (here / "go").exists():
            time.sleep(0.05)

    class SlowToStart(Rule):
        description = "Its engine takes its time to start."

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.ballast = "x" * 2**20

        def scan(self, window):
            pass

        def evaluate(self):
            return Verdict()
    """
)


def test_ctrl_c_while_the_rule_engine_starts_stops_the_job_before_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the launcher ignored SIGINT while it started the engine: a Ctrl-C then was lost, and the
    # command, started next, trained to its end as if nothing had been typed
    (tmp_path / "slowstart.py").write_text(SLOW_TO_START)
    monkeypatch.setenv("STARTING_RULE_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    job_dir = tmp_path / "job"
    trained = tmp_path / "trained"
    command = [sys.executable, "-c", f"open({str(trained)!r}, 'w')"]
    options = ("--no-report", "--rule", "slowstart:SlowToStart")
    with _running(job_dir, command, options) as process:
        _wait_until(process, (tmp_path / "importing").exists, "the rule engine never started")
        process.send_signal(signal.SIGINT)  # to the launcher alone, as it starts the engine
        (tmp_path / "go").touch()
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert not trained.exists()
    assert (_job(job_dir)["status"], _job(job_dir)["exit_code"]) == ("Stopped", 130)


#: loads with two worker processes until SIGTERM's default action kills it (no atexit runs)
LOADING_UNTIL_KILLED = textwrap.dedent(
    """
    import pathlib, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model = torch.nn.Linear(4, 1)
    while True:
        for x, y in DataLoader(dataset, batch_size=8, num_workers=2):
            torch.nn.functional.mse_loss(model(x), y).backward()
            pathlib.Path(sys.argv[1]).touch()
    """
)


def test_a_command_killed_by_sigterm_leaves_no_worker_report_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the data-loader workers report to a temporary file of the training process, which the
    # signal kills before its session can remove anything; a temporary folder of a short name,
    # as torch passes batches through a socket there (of at most 107 bytes)
    temp_dir = Path(tempfile.mkdtemp())
    monkeypatch.setenv("TMPDIR", str(temp_dir))
    script = tmp_path / "loading.py"
    script.write_text(LOADING_UNTIL_KILLED)
    loading = tmp_path / "loading"
    job_dir = tmp_path / "job"
    try:
        with _running(job_dir, [sys.executable, str(script), str(loading)]) as process:
            _wait_until(process, loading.exists, "the script never loaded a batch")
            process.send_signal(signal.SIGTERM)  # to the launcher alone, which passes it on
            _, stderr = process.communicate(timeout=120)
        left = list(temp_dir.glob("stepscope-workers-*"))
    finally:
        shutil.rmtree(temp_dir)
    assert _job(job_dir)["status"] == "Stopped", stderr
    assert left == []


def test_a_command_killed_by_a_signal_exits_with_the_shells_status(tmp_path: Path) -> None:
    # the OOM killer's SIGKILL: a shell reports 128 + 9, and so must the launcher
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    job_dir = tmp_path / "job"
    result = _stepscope(
        "run", "--no-report", "--rule", "StepOutlier", "--job-dir", str(job_dir), "--", str(script)
    )
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    job = _job(job_dir)
    assert job["status"] == "Failed"
    assert job["exit_code"] == -signal.SIGKILL


def test_run_rejects_an_existing_job_folder(tmp_path: Path, train_script: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.json").write_text("{}")
    result = _stepscope("run", "--job-dir", str(job_dir), "--", "python", str(train_script))
    assert result.returncode == 2
    assert "--job-dir must be a folder that holds no job yet" in result.stderr
    assert "each node of a multi-node job needs one of its own" in result.stderr


def test_launch_takes_a_script_alone_and_its_arguments(tmp_path: Path, train_script: Path) -> None:
    # product example: launch("train.py", args=["--epochs", "3"], ...)
    from stepscope.launcher import launch

    job = launch(
        str(train_script),
        args=["--steps", "3"],
        job_dir=tmp_path / "job",
        rules=["StepOutlier"],
        report=False,
    )
    assert job.status == "Completed", job.info
    assert job.info["command"] == [str(train_script), "--steps", "3"]
    assert job.info["hyperparameters"] == {"steps": 3}
    with pytest.raises(ConfigError, match="args must be a list of strings"):
        launch(str(train_script), args="--steps 3", job_dir=tmp_path / "other")


def test_job_json_names_the_rules_however_launch_was_given_them(tmp_path: Path) -> None:
    # job.json (and the Information page) listed "str", "RuleConfig" and "" for these
    from stepscope import ProfilerRule, rule_configs
    from stepscope.launcher import launch
    from stepscope.rules.builtin import BatchSize, LowGPUUtilization

    rules = [
        "StepOutlier",
        rule_configs.CPUBottleneck(),
        LowGPUUtilization,
        BatchSize(),
        ProfilerRule.sagemaker(rule_configs.Dataloader()),
    ]
    job = launch(
        [sys.executable, "-c", "pass"], rules=rules, job_dir=tmp_path / "job", report=False
    )
    expected = ["StepOutlier", "CPUBottleneck", "LowGPUUtilization", "BatchSize", "Dataloader"]
    assert job.info["rules"] == expected
    assert json.loads((tmp_path / "job" / "job.json").read_text())["rules"] == expected
    default = launch([sys.executable, "-c", "pass"], job_dir=tmp_path / "other", report=False)
    assert default.info["rules"] == ["ProfilerReport"]


_LAUNCHER = textwrap.dedent(
    """
    import sys
    from stepscope import ProfilerRule, Rule, launch, rule_configs
    from stepscope.rules import Verdict

    class Custom(Rule):
        description = "A rule of the script's own."

        def scan(self, window):
            pass

        def evaluate(self):
            return Verdict(triggered=False, message="custom rule ran")

    def main(rules):
        job = launch([sys.executable, "train.py", "--steps", "3"], rules=rules, report=False)
        print(job.status, sorted(job.rule_statuses()))
    """
)


@pytest.mark.parametrize(
    "call",
    [
        "main([ProfilerRule.stepscope(rule_configs.StepOutlier(stddev=3))])",
        'if __name__ == "__main__":\n    main(["StepOutlier", Custom])',
    ],
    ids=["unguarded", "guarded-with-own-rule"],
)
def test_a_script_that_calls_launch_runs_its_job_once(
    tmp_path: Path, train_script: Path, call: str
) -> None:
    # README example: launch(...) at the top of a script, without `if __name__ == "__main__"`;
    # a rule class of the script's own needs the guard (the engine imports the script for it)
    (tmp_path / "launcher.py").write_text(_LAUNCHER + call + "\n")
    result = subprocess.run(
        [sys.executable, "launcher.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert "rule engine failed" not in result.stderr, result.stderr
    rules = ["Custom", "StepOutlier"] if "Custom" in call else ["StepOutlier"]
    assert result.stdout.splitlines()[-1] == f"Completed {rules}"
    assert len(list((tmp_path / "stepscope-jobs").iterdir())) == 1


def _command_line(process: psutil.Process) -> str:
    """``process``'s command line; empty for one that has ended (a zombie has none)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _killing_the_child(marked: str) -> Callable[[object], None]:
    """An ``on_start`` that kills, as the OOM killer would, the child process whose command line
    holds ``marked``, and waits for it to die (the launcher reaps it: a zombie, not a reaped
    pid, is what to wait for)."""

    def kill(job: object) -> None:
        child = next(c for c in psutil.Process().children() if marked in _command_line(c))
        child.kill()
        deadline = time.monotonic() + 60
        while child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)

    return kill


def test_a_rule_engine_killed_while_the_job_trains_still_leaves_final_verdicts(
    tmp_path: Path, train_script: Path
) -> None:
    from stepscope.launcher import launch

    job = launch(
        str(train_script),
        job_dir=tmp_path / "job",
        rules=["StepOutlier"],
        report=False,
        on_start=_killing_the_child("spawn_main"),
    )
    assert job.status == "Completed", job.info
    verdict = job.rule_statuses()["StepOutlier"]
    assert verdict["status"] != "InProgress", verdict
    assert verdict["datapoints"] > 0  # judged on the job's steps, after the job


def test_a_system_monitor_killed_while_the_job_trains_is_reported(
    tmp_path: Path, train_script: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from stepscope.launcher import launch

    with caplog.at_level(logging.WARNING, logger="stepscope.launcher"):
        job = launch(
            str(train_script),
            job_dir=tmp_path / "job",
            rules=["StepOutlier"],
            report=False,
            on_start=_killing_the_child("-m stepscope.collect.monitor"),
        )
    assert job.status == "Completed", job.info
    [warning] = [m for m in caplog.messages if "system monitor" in m]
    assert "exit code -9" in warning and "monitor-algo-1.log" in warning


def test_a_bad_rule_list_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    rules = ["--rule", "StepOutlier", "--rule", "stepoutlier"]
    command = [sys.executable, "-c", "print('trained')"]
    result = _stepscope("run", *rules, "--job-dir", str(job_dir), "--", *command)
    assert result.returncode == 2
    assert "--rule must be each rule at most once, got ['StepOutlier']" in result.stderr
    assert "trained" not in result.stdout
    assert not job_dir.exists()


def test_run_without_a_command_says_what_is_missing(tmp_path: Path) -> None:
    result = _stepscope("run", "--job-dir", str(tmp_path / "job"))
    assert result.returncode == 2
    assert "the command to profile is required" in result.stderr
    assert "stepscope run -- python train.py" in result.stderr


_NO_SCRIPT = "a Python script that exists"
#: torch's own ``torchrun``, beside this interpreter
_TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@pytest.mark.parametrize(
    ("command", "missing", "allowed"),
    [
        (["typo.py", "--lr", "1"], "typo.py", _NO_SCRIPT),
        (["python", "typo.py", "--lr", "1"], "typo.py", _NO_SCRIPT),
        (["python", "-u", "-W", "ignore", "-X", "dev", "typo.py"], "typo.py", _NO_SCRIPT),
        ([_TORCHRUN, "--nproc-per-node", "2", "typo.py", "--lr", "1"], "typo.py", _NO_SCRIPT),
        (
            ["python", "-m", "torch.distributed.run", "--standalone", "typo.py"],
            "typo.py",
            _NO_SCRIPT,
        ),
        (
            ["no-such-trainer-program"],
            "no-such-trainer-program",
            "a program on PATH or the path of an executable file",
        ),
    ],
    ids=["script", "python-script", "python-options", "torchrun", "python-m-torchrun", "program"],
)
def test_a_command_that_cannot_start_is_refused_before_the_job_starts(
    tmp_path: Path, command: list[str], missing: str, allowed: str
) -> None:
    job_dir = tmp_path / "job"
    result = _stepscope("run", "--job-dir", str(job_dir), "--", *command, cwd=tmp_path)
    assert result.returncode == 2
    assert f"command must be {allowed}, got {missing!r}" in result.stderr
    assert "Profiling into" not in result.stderr
    assert not job_dir.exists()


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (
            [_TORCHRUN, "--nproc-per-node", "2", "train.py"],
            "--nproc-per-node must be 1 when the command is torchrun itself",
        ),
        (
            ["python", "-m", "torch.distributed.run", "train.py"],
            "--nproc-per-node must be 1 when the command is torchrun itself",
        ),
        (["python", "-u", "train.py"], "command must be a script (or -m module) right after"),
        (["python", "-c", "pass"], "command must be a script (or -m module) right after"),
    ],
    ids=["torchrun", "python-m-torchrun", "python-options", "python-c"],
)
def test_a_command_torchrun_cannot_take_is_refused_with_several_processes(
    tmp_path: Path, command: list[str], error: str
) -> None:
    (tmp_path / "train.py").write_text("print('trained')\n")
    job_dir = tmp_path / "job"
    result = _stepscope(
        "run", "--nproc-per-node", "2", "--job-dir", str(job_dir), "--", *command, cwd=tmp_path
    )
    assert result.returncode == 2
    assert error in result.stderr
    assert not job_dir.exists()


def test_the_profiled_command_gets_its_arguments_unchanged(tmp_path: Path) -> None:
    # words that look like stepscope's own options with a value starting with '-' stay the
    # command's, in the form they were given
    show = "import sys; print(sys.argv[1:])"
    command = [sys.executable, "-c", show, "--rule", "-1:2", "--", "--config", "-3:4"]
    result = _stepscope("run", "--no-report", "--job-dir", str(tmp_path / "job"), *command)
    assert result.returncode == 0, result.stderr
    assert "['--rule', '-1:2', '--', '--config', '-3:4']" in result.stdout


DDP_TRAIN = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        torch.nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
        optimizer.step()
        optimizer.zero_grad()
    # DDP holds the gloo group: freed at the interpreter's exit, the group aborts the rank now
    # and then (see DDP_LOSS_SCRIPT in tests/collect/torch/test_torch_distributed.py)
    del model, optimizer
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_command_that_starts_its_own_ranks_is_recorded_with_them(tmp_path: Path) -> None:
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_TRAIN)
    job_dir = tmp_path / "job"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    result = _stepscope(
        "run", "--no-report", "--job-dir", str(job_dir), "--", *torchrun, str(script)
    )
    assert result.returncode == 0, result.stderr
    job = _job(job_dir)
    assert sorted(job["ranks"]) == ["0", "1"]
    assert job["nproc_per_node"] == 2
    assert {rank["backend"] for rank in job["ranks"].values()} == {"gloo"}


@pytest.mark.slow
def test_the_torchrun_program_itself_profiles_nothing(tmp_path: Path) -> None:
    # the `torchrun` console script runs as `python .../torchrun`: its launcher process used to
    # be profiled as rank 0, its Python profile of the whole run filed under 0-algo-1
    import pstats

    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_TRAIN)
    job_dir = tmp_path / "job"
    torchrun = [_TORCHRUN, "--standalone", "--nproc-per-node=2"]
    result = _stepscope(
        "run",
        "--no-report",
        "--job-dir",
        str(job_dir),
        "--",
        *torchrun,
        str(script),
        "--lr",
        "0.05",
    )
    assert result.returncode == 0, result.stderr
    assert sorted(_job(job_dir)["ranks"]) == ["0", "1"]
    # the script's options are its hyperparameters; torchrun's own used to be listed with them
    assert _job(job_dir)["hyperparameters"] == {"lr": 0.05}
    cprofile = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile"
    profiled = sorted(cprofile.glob("*/*/python_stats"))
    assert {path.parent.parent.name for path in profiled} == {"0-algo-1", "1-algo-1"}
    for path in profiled:
        functions = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
        assert not any(file.endswith("torch/distributed/run.py") for file, _, _ in functions)


def _train_on_two_nodes(tmp_path: Path, torchrun_options: Callable[[int], list[str]]) -> None:
    """Train ``DDP_TRAIN`` as a job of two nodes with one rank each, a ``stepscope run`` per node
    with the folder ``node<index>``, torchrun given ``torchrun_options(index)``."""
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_TRAIN)
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "stepscope", "run", "--no-report", "--job-dir"]
            + [str(tmp_path / f"node{index}"), "--", _TORCHRUN, "--nnodes", "2"]
            + ["--nproc-per-node", "1", *torchrun_options(index), str(script)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in (0, 1)
    ]
    for node in nodes:
        _, stderr = node.communicate(timeout=240)
        assert node.returncode == 0, stderr


def _assert_named(job_dir: Path, rank: int, node: str) -> None:
    """The node's ``job.json``, its rank, framework and system files all name it ``node``."""
    job = _job(job_dir)
    assert job["nodes"] == [node] and list(job["hosts"]) == [node]
    assert list(job["hardware"]) == [node]
    assert {(r["rank"], r["node"], r["node_id"]) for r in job["ranks"].values()} == {
        (rank, node, f"{rank}-{node}")
    }
    output = job_dir / "profiler-output"
    timelines = list(output.glob("framework/pevents/*/*.json"))
    assert timelines and all(f"_{rank}-{node}_" in path.name for path in timelines)
    system = list(output.glob("system/incremental/*/*.json"))
    assert system and all(path.name.endswith(f".{node}.json") for path in system)


@pytest.mark.slow
def test_each_node_of_a_multi_node_torchrun_job_is_named_by_its_node_rank(tmp_path: Path) -> None:
    # every node used to call itself algo-1: the second node's ranks, monitor and hardware
    # took the first node's name
    from tests.servers import free_port

    port = str(free_port())
    _train_on_two_nodes(
        tmp_path,
        lambda index: (
            ["--master-addr", "127.0.0.1", "--master-port", port]
            + ([f"--node-rank={index}"] if index else ["--node_rank", "0"])
        ),
    )
    for index in (0, 1):
        _assert_named(tmp_path / f"node{index}", index, f"algo-{index + 1}")


@pytest.mark.slow
def test_the_nodes_a_rendezvous_numbers_are_named_by_their_ranks(tmp_path: Path) -> None:
    # without --node-rank a c10d rendezvous numbers the nodes, which the launchers cannot know
    # before it: every node called itself algo-1, and their system metrics took one name
    from tests.servers import free_port

    endpoint = f"127.0.0.1:{free_port()}"
    _train_on_two_nodes(
        tmp_path,
        lambda index: ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "two"],
    )
    ranks = [_job(tmp_path / f"node{index}")["ranks"] for index in (0, 1)]
    assert sorted(rank for node_ranks in ranks for rank in node_ranks) == ["0", "1"]
    for index, node_ranks in enumerate(ranks):
        (rank,) = map(int, node_ranks)
        # one rank per node: its rank is the number the rendezvous gave its node
        _assert_named(tmp_path / f"node{index}", rank, f"algo-{rank + 1}")


def test_a_terminal_that_goes_away_leaves_the_job_to_run_to_its_end(
    tmp_path: Path, train_script: Path
) -> None:
    # `stepscope run ... 2>&1 | head`, or a log pipe whose reader died: nothing can be printed
    job_dir = tmp_path / "job"
    with _running(job_dir, [sys.executable, str(train_script)]) as process:
        assert process.stderr is not None and process.stdout is not None
        process.stderr.close()  # the reader is gone before the first line
        stdout, _ = process.communicate(timeout=240)
    assert "done" in stdout  # the training ran to its end
    assert process.returncode == 0
    job = _job(job_dir)
    assert (job["status"], job["exit_code"]) == ("Completed", 0)


def _status_everywhere(job_dir: Path) -> tuple[str, str]:
    """The job's status as ``open_job(...).metadata`` and as the UI's job list give it."""
    from stepscope.store import open_job
    from stepscope.ui.discovery import discover_jobs

    (listed,) = discover_jobs([job_dir.parent])
    return open_job(job_dir).metadata["status"], listed.status


def test_a_launcher_killed_with_sigkill_leaves_a_failed_job_once_its_command_is_gone(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "jobs" / "job"
    command = [sys.executable, str(train_script), "--steps", "100000", "--sleep-s", "0.01"]

    def training() -> bool:
        return any((job_dir / "profiler-output" / "framework" / "ranks").glob("*.json"))

    with _running(job_dir, command) as process:
        _wait_until(process, training, "the command never started writing")
        children = psutil.Process(process.pid).children(recursive=True)
        process.kill()  # kill -9 of `stepscope run` alone: its command trains on
        process.wait(timeout=60)
        assert _status_everywhere(job_dir) == ("Running", "running")
        os.killpg(process.pid, signal.SIGKILL)  # then the command goes too
        psutil.wait_procs(children, timeout=60)
        process.communicate(timeout=60)
    assert _status_everywhere(job_dir) == ("Failed", "failed")
    assert _job(job_dir)["status"] == "Running"  # what it recorded: the truth is read, not written
    assert _job(job_dir)["end_time_us"] is None
    # it ended at its last write: the list and the Information page give it an end
    from stepscope.store import open_job
    from stepscope.ui.discovery import discover_jobs

    (listed,) = discover_jobs([job_dir.parent])
    job = open_job(job_dir)
    job.refresh()
    ended_us = job.metadata["end_time_us"]
    assert listed.start_us is not None and listed.end_us is not None
    assert listed.start_us < listed.end_us and job.metadata["start_time_us"] < ended_us
    update = _stepscope("update", str(job_dir), "--detailed", "7:2")
    assert update.returncode == 2 and "The job is Failed (its launcher" in update.stderr


def test_a_launcher_killed_before_its_command_profiled_anything_leaves_it_running(
    tmp_path: Path,
) -> None:
    # the command loads its data for minutes before its first step: no rank has a file yet
    job_dir = tmp_path / "jobs" / "job"
    script = tmp_path / "loading.py"
    script.write_text("import time\nprint('loading', flush=True)\ntime.sleep(300)\n")
    with _running(job_dir, [sys.executable, str(script)]) as process:
        assert process.stdout is not None and process.stdout.readline() == "loading\n"
        children = psutil.Process(process.pid).children(recursive=True)
        process.kill()  # kill -9 of `stepscope run` alone
        process.wait(timeout=60)
        assert not list(job_dir.glob("profiler-output/framework/ranks/*"))
        assert _status_everywhere(job_dir) == ("Running", "running")
        os.killpg(process.pid, signal.SIGKILL)  # then the command goes too
        psutil.wait_procs(children, timeout=60)
        process.communicate(timeout=60)
    assert _status_everywhere(job_dir) == ("Failed", "failed")


def test_the_live_rules_of_a_job_whose_launcher_was_killed_judge_the_whole_command(
    tmp_path: Path, train_script: Path
) -> None:
    # kill -9 of the launcher alone: the command trains to its end, and the rules judge it all
    job_dir = tmp_path / "jobs" / "job"
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        textwrap.dedent(
            f"""
            from stepscope.launcher import launch
            from stepscope.rules import ProfilerRule, rule_configs

            if __name__ == "__main__":
                rule = rule_configs.StepOutlier(scan_interval_us=1_000_000)
                launch([{str(train_script)!r}, "--steps", "50", "--sleep-s", "0.01"],
                       job_dir={str(job_dir)!r}, rules=[ProfilerRule.stepscope(rule)],
                       report=False)
            """
        )
    )
    with subprocess.Popen([sys.executable, str(launcher)], start_new_session=True) as process:
        try:
            _wait_until(
                process,
                lambda: any(job_dir.glob("profiler-output/framework/ranks/*.json")),
                "the command never started training",
            )
            children = psutil.Process(process.pid).children(recursive=True)
            process.kill()
            process.wait(timeout=60)
            psutil.wait_procs(children, timeout=180)  # the command, the monitor, the rules
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    verdict = json.loads((job_dir / "rule-output" / "StepOutlier" / "status.json").read_text())
    assert verdict["status"] != "InProgress", verdict
    assert verdict["datapoints"] > 0  # the steps the command wrote at its end, judged


def test_a_job_whose_end_could_not_be_recorded_is_not_running_once_its_launcher_is_gone(
    tmp_path: Path, train_script: Path
) -> None:
    # the disk fills up at the end: the end marker is written, the completed job.json is not
    job_dir = tmp_path / "jobs" / "job"
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        textwrap.dedent(
            f"""
            import resource
            from pathlib import Path
            from stepscope.launcher import launch

            def fill_the_disk(job):
                size = (job.path / "job.json").stat().st_size
                resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

            launch({str(train_script)!r}, job_dir={str(job_dir)!r}, rules=["StepOutlier"],
                   report=False, on_start=fill_the_disk)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(launcher)], capture_output=True, text=True, timeout=240
    )
    assert "could not record the job's end" in result.stderr, result.stderr
    assert (job_dir / "profiler-output" / "training_job_end.ts").exists()
    assert _job(job_dir)["status"] == "Running"
    assert _status_everywhere(job_dir) == ("Failed", "failed")


def test_an_interpreter_with_flags_that_keep_the_bootstrap_is_profiled(
    tmp_path: Path, train_script: Path
) -> None:
    # only -I, -E and -S (alone or grouped) are refused; other flags and their values are not
    from stepscope.launcher import launch

    flags = ["-u", "-Werror::SyntaxWarning", "-X", "utf8", "-B"]
    job = launch(
        [sys.executable, *flags, str(train_script), "--steps", "3"],
        job_dir=tmp_path / "job",
        report=False,
    )
    assert job.status == "Completed", job.info
    assert list(job.info["ranks"]) == ["0"], "the script was not instrumented"


def test_a_wall_clock_stepped_back_during_the_job_leaves_its_duration_whole(
    tmp_path: Path,
) -> None:
    # NTP steps the wall clock an hour back once the job has started: job.json still says the
    # job took about the two seconds it ran, not minus an hour
    job_dir = tmp_path / "job"
    launcher = textwrap.dedent(
        f"""
        import os, sys, time
        wall = time.time
        started = os.path.join({str(job_dir)!r}, "job.json")
        time.time = lambda: wall() - (3600.0 if os.path.exists(started) else 0.0)
        from stepscope.cli import main
        sys.exit(main(["run", "--no-report", "--rule", "StepOutlier", "--job-dir",
                       {str(job_dir)!r}, "--", sys.executable, "-c", "import time; time.sleep(2)"]))
        """
    )
    subprocess.run([sys.executable, "-c", launcher], check=True, timeout=240)
    meta = json.loads((job_dir / "job.json").read_text())
    assert meta["status"] == "Completed"
    assert 2.0 <= (meta["end_time_us"] - meta["start_time_us"]) / 1e6 < 600


def test_run_sets_rule_parameters_as_stepscope_rules_does(
    tmp_path: Path, train_script: Path
) -> None:
    job_dir = tmp_path / "job"
    rules = ["--rule", "StepOutlier", "--param", "StepOutlier.stddev=7"]
    result = _stepscope(
        "run", "--no-report", *rules, "--job-dir", str(job_dir), "--", sys.executable,
        str(train_script),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    status = json.loads((job_dir / "rule-output" / "StepOutlier" / "status.json").read_text())
    assert "beyond 7 standard deviations" in status["message"]


def test_launch_gives_the_script_its_hyperparameters_as_sagemaker_does(tmp_path: Path) -> None:
    # launch("train.py", hyperparameters={"epochs": 3}) only wrote them into job.json: the script
    # ran with its own defaults. SageMaker passes each one as --name value, in name order.
    from stepscope.launcher import launch

    script = tmp_path / "train.py"
    script.write_text(
        "import json, pathlib, sys\n"
        "pathlib.Path(__file__).with_name('argv.json').write_text(json.dumps(sys.argv[1:]))\n"
    )
    given = {"lr": 0.5, "epochs": 3, "name": "run a", "amp": True, "b": 8}
    job = launch(str(script), args=["--seed", "1"], hyperparameters=given, job_dir=tmp_path / "job",
                 rules=["StepOutlier"], report=False)  # fmt: skip
    assert job.status == "Completed", job.info
    arguments = ["--seed", "1", "--amp", "True", "-b", "8", "--epochs", "3", "--lr", "0.5",
                 "--name", "run a"]  # fmt: skip
    assert json.loads((tmp_path / "argv.json").read_text()) == arguments
    assert job.info["command"] == [str(script), *arguments]
    assert job.info["hyperparameters"] == given
    with pytest.raises(ConfigError, match="hyperparameters must be a dict of names"):
        launch(str(script), hyperparameters={"": 1}, job_dir=tmp_path / "other")
    assert not (tmp_path / "other").exists()

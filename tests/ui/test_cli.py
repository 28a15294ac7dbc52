"""``stepscope ui``: serves the given roots on 127.0.0.1, or on a wider bind with a token."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import stepscope
from tests.servers import free_port

from .conftest import write_job_folder


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    env = {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        # the stepscope under test, wherever this process imports it from
        "PYTHONPATH": str(Path(stepscope.__file__).parents[1]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "stepscope", "ui", "--no-browser", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_until_serving(url: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        try:
            socket.create_connection(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the server did not start")


def _stop(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGINT)
    try:
        _, stderr = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    return stderr


def test_serves_the_jobs_under_the_given_root_on_loopback(tmp_path: Path, jobs_root: Path):
    write_job_folder(jobs_root, "job-a")
    port = free_port()
    server = _start([str(jobs_root), "--port", str(port)], tmp_path)
    try:
        _wait_until_serving(("127.0.0.1", port), server)
        status, body = _get(f"http://127.0.0.1:{port}/api/jobs")
        assert status == 200
        assert [job["name"] for job in json.loads(body)["jobs"]] == ["job-a"]
    finally:
        stderr = _stop(server)
    assert f"http://127.0.0.1:{port}/" in stderr
    assert "token" not in stderr
    # Ctrl+C, as the start-up line says, stops it quietly
    assert "Traceback" not in stderr and server.returncode == 0, stderr


def test_a_wider_bind_prints_a_token_and_requires_it(tmp_path: Path, jobs_root: Path):
    write_job_folder(jobs_root, "job-a")
    port = free_port()
    server = _start([str(jobs_root), "--port", str(port), "--host", "0.0.0.0"], tmp_path)
    try:
        _wait_until_serving(("127.0.0.1", port), server)
        assert _get(f"http://127.0.0.1:{port}/api/jobs")[0] == 401
    finally:
        stderr = _stop(server)
    token = re.search(r"\?token=([\w-]+)", stderr)
    assert token, stderr
    # a wildcard bind is reached by this machine's name, not by 0.0.0.0
    assert f"http://{socket.gethostname()}:{port}/?token=" in stderr
    assert "0.0.0.0" not in stderr
    # a fresh server, a fresh token: the printed one opens it
    port = free_port()
    server = _start([str(jobs_root), "--port", str(port), "--host", "0.0.0.0"], tmp_path)
    try:
        _wait_until_serving(("127.0.0.1", port), server)
        line = ""
        while "token=" not in line:
            line = server.stderr.readline() if server.stderr else ""
            assert line or server.poll() is None
        printed = re.search(r"\?token=([\w-]+)", line)
        assert printed and printed.group(1) != token.group(1)
        status, _ = _get(
            f"http://127.0.0.1:{port}/api/jobs",
            headers={"Authorization": f"Bearer {printed.group(1)}"},
        )
        assert status == 200
    finally:
        _stop(server)


def _run_ui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepscope", "ui", "--no-browser", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_bad_port_is_a_configuration_error_naming_the_flag(tmp_path: Path, jobs_root: Path):
    result = _run_ui("--port", "0", str(jobs_root))
    assert result.returncode == 2
    assert "stepscope: error: --port must be an integer from 1 to 65535, got 0." in result.stderr


def test_a_root_that_is_missing_or_not_a_trace_is_an_error(tmp_path: Path) -> None:
    missing = _run_ui(str(tmp_path / "no-such-folder"))
    assert missing.returncode == 1
    assert f"No profiling job or trace found at '{tmp_path / 'no-such-folder'}'" in missing.stderr
    not_a_trace = tmp_path / "notes.txt"
    not_a_trace.write_text("not a trace")
    wrong = _run_ui(str(not_a_trace))
    assert wrong.returncode == 1
    assert f"'{not_a_trace}' is not a format stepscope reads" in wrong.stderr
    remote = _run_ui("s3://bucket/profiler-output")
    assert remote.returncode == 1
    assert "the Profiler UI lists local jobs" in remote.stderr
    assert "Profiler UI at" not in missing.stderr + wrong.stderr + remote.stderr


def test_a_port_in_use_is_an_error_and_nothing_is_announced(
    tmp_path: Path, jobs_root: Path
) -> None:
    # another server holds the port: no URL is printed (nor a browser sent there)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _run_ui(str(jobs_root), "--port", str(port))
    assert result.returncode == 1
    assert f"Cannot serve the Profiler UI on 127.0.0.1 port {port}" in result.stderr
    assert "--port" in result.stderr
    assert "Profiler UI at" not in result.stderr

"""open_job on ``s3://`` against a real S3 API: a moto server on a free local port."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.analysis import _kineto_synthetic as synthetic
from tests.servers import S3_TEST_SETTINGS, free_port, s3_server

from stepscope.errors import StorageAccessError, UnsupportedFormatError
from stepscope.store import open_job
from stepscope.store.filesystem import source_files
from stepscope.testing import TINY_JOB, generate_job

pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """One S3 server for the module, with the AWS environment pointing at it."""
    with pytest.MonkeyPatch.context() as env, s3_server(env) as endpoint:
        yield endpoint


def _upload(client, folder: Path, bucket: str, prefix: str) -> list[str]:
    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


def test_a_sagemaker_output_on_s3_reads_like_the_local_one(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    job = generate_job(tmp_path / "job", **TINY_JOB)
    output = job / "profiler-output"
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="training")
    late = sorted(output.glob("framework/pevents/*/*_pythontimeline.json"))[-1]
    late_copy = tmp_path / late.name
    late.rename(late_copy)
    _upload(client, output, "training", "jobs/run-1/profiler-output")

    data = open_job("s3://training/jobs/run-1")
    assert (data.kind, data.name) == ("sagemaker", "run-1")
    assert data.path == "s3://training/jobs/run-1"
    assert data.cache_dir.parent == tmp_path / "cache"
    assert data.refresh() is True
    con = data.connect()
    records = sum(len(p.read_text().splitlines()) for p in output.glob("system/**/*.json"))
    assert con.execute("SELECT count(*) FROM system").fetchone() == (records,)
    spans = sum(
        sum(1 for e in json.loads(p.read_text()) if e.get("ph") == "X")
        for p in output.glob("framework/pevents/*/*.json")
    )
    assert con.execute("SELECT count(*) FROM events").fetchone() == (spans,)
    assert data.metadata["ended"] is True and data.metadata["ranks"][0]["node"] == "algo-1"
    assert data.refresh() is False and data.last_refresh_files == []

    # a file uploaded later is the only one read by the next refresh
    key = f"jobs/run-1/profiler-output/{late.relative_to(output).as_posix()}"
    client.upload_file(str(late_copy), "training", key)
    assert data.refresh() is True
    assert data.last_refresh_files == [f"profiler-output/{late.relative_to(output).as_posix()}"]
    added = sum(1 for e in json.loads(late_copy.read_text()) if e.get("ph") == "X")
    assert data.connect().execute("SELECT count(*) FROM events").fetchone() == (spans + added,)


def test_storage_options_reach_s3fs(s3_endpoint: str, tmp_path: Path) -> None:
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="other")
    client.put_object(Bucket="other", Key="out/system/incremental/2023/1700000040.algo-1.json", Body=b'{"Type": "cpu", "Name": "cpu0", "Dimension": "CPUUtilization", "Value": 3.5, "NodeId": "algo-1", "Timestamp": 1700000040.25}\n')  # fmt: skip
    data = open_job(
        "s3://other/out",
        cache_dir=tmp_path / "c",
        storage_options={"client_kwargs": {"endpoint_url": s3_endpoint}},
    )
    rows = data.connect().execute("SELECT timestamp_us, value FROM system").fetchall()
    assert rows == [(1700000040250000, 3.5)]


def test_retries_follow_the_environment_when_it_sets_them(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="retries")
    client.put_object(Bucket="retries", Key="run/system/x.json", Body=b"")

    def attempts() -> int:
        files = source_files("s3://retries/run")
        assert [info.path for info in files.walk()] == ["system/x.json"]
        return int(files.fs.s3.meta.config.retries["total_max_attempts"])

    assert attempts() == 3  # stepscope's own: a request fails within about half a minute
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "7")
    assert attempts() == 7


def test_a_missing_prefix_is_job_not_found(s3_endpoint: str) -> None:
    from stepscope.errors import JobNotFoundError

    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="empty")
    with pytest.raises(JobNotFoundError, match="'empty' holds nothing under 'nothing-here/'"):
        open_job("s3://empty/nothing-here")
    # a typo in the bucket's name used to read as a missing job, with nothing more
    for url in ("s3://no-such-bucket/run", "s3://no-such-bucket"):
        with pytest.raises(JobNotFoundError, match="The bucket 'no-such-bucket' does not exist"):
            open_job(url)


def test_a_single_trace_on_s3_reads_like_a_local_one(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trace file's URL used to be listed as a folder and failed with a raw FileNotFoundError.
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    trace = synthetic.write_trace(tmp_path)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="traces")
    client.upload_file(str(trace), "traces", f"run/{trace.name}")
    client.put_object(Bucket="traces", Key="run/notes.json", Body=b'{"note": "not a trace"}')

    data = open_job(f"s3://traces/run/{trace.name}")
    assert (data.kind, data.name) == ("kineto", "synthetic_rank-0")  # as the local trace is named
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    kept = sum(1 for e in events if e["ph"] in ("X", "i"))
    assert data.connect().execute("SELECT count(*) FROM events").fetchone() == (kept,)
    assert data.refresh() is False
    with pytest.raises(UnsupportedFormatError):
        open_job("s3://traces/run/notes.json")


def test_refused_credentials_are_a_clear_error(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bare "Forbidden" used to be all the CLI said
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="guarded")
    _upload(client, generate_job(tmp_path / "job", **TINY_JOB), "guarded", "run")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    _moto_auth(s3_endpoint, b"0")  # from now on, keys are checked
    try:
        for url in ("s3://guarded/run", "s3://guarded"):  # a bucket's root used to be not found
            with pytest.raises(StorageAccessError, match="credentials") as refused:
                open_job(url)
            assert repr(url) in str(refused.value)
    finally:
        _moto_auth(s3_endpoint, b"inf")


def _moto_auth(endpoint: str, actions_before_checking: bytes) -> None:
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=actions_before_checking,
        headers={"Content-Type": "text/plain"},  # a form body would be parsed away
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()


def test_an_endpoint_that_goes_away_is_a_clear_error_and_the_job_reads_on_when_it_is_back(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore's EndpointConnectionError used to come through, a traceback in the CLI
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="followed")
    _upload(client, generate_job(tmp_path / "job", **TINY_JOB), "followed", "run")
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    data = open_job("s3://followed/run", storage_options=options)
    assert data.refresh() is True
    server.stop()
    with pytest.raises(StorageAccessError, match="endpoint") as unreachable:
        data.refresh()
    assert "s3://followed/run" in str(unreachable.value)
    with pytest.raises(StorageAccessError, match="endpoint"):
        open_job("s3://followed/run", storage_options=options)
    # the same S3 server back (moto keeps its buckets in the process): nothing was lost
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        assert data.refresh() is False
        rows = data.connect().execute("SELECT count(*) FROM events").fetchone()
    finally:
        server.stop()
    assert rows is not None and rows[0] > 0


def test_the_rules_command_reads_an_s3_job_and_prints_only_its_own_messages(
    s3_endpoint: str, tmp_path: Path
) -> None:
    # botocore's INFO messages ("Found credentials in environment variables.") used to be printed
    # as if they were stepscope's
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="cli")
    _upload(client, generate_job(tmp_path / "job", **TINY_JOB), "cli", "run")
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "rules", "s3://cli/run", "--rule", "StepOutlier"]
        + ["--output-dir", str(tmp_path / "rules")],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "STEPSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "rules" / "StepOutlier" / "status.json").exists()
    assert "credentials" not in result.stderr and "endpoint" not in result.stderr


def test_an_endpoint_that_never_answers_is_a_clear_error_not_a_wait_of_minutes(
    tmp_path: Path,
) -> None:
    # s3fs's retries times botocore's attempts times a 15 s read timeout: the error came after
    # about 7 minutes. A socket that accepts connections and never answers stands for the endpoint.
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = {
            **os.environ,
            **S3_TEST_SETTINGS,
            "AWS_ENDPOINT_URL": endpoint,
            "STEPSCOPE_CACHE_DIR": str(tmp_path / "cache"),
        }
        result = subprocess.run(
            [sys.executable, "-m", "stepscope", "rules", "s3://silent/run"],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
    assert result.returncode == 1
    assert "s3://silent/run" in result.stderr and endpoint in result.stderr
    assert "Check the endpoint" in result.stderr


def test_the_warnings_of_traces_on_s3_name_their_urls(
    s3_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # They named the temporary local copy each trace is read through, deleted by then.
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="named")
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}
    events = [{**op, "ts": 1_700_000_000_000_000 + 10 * i} for i in range(5)] + [{**op, "ts": -1}]
    body = json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()
    client.put_object(Bucket="named", Key="run/trace.json", Body=body)
    client.put_object(Bucket="named", Key="run/rank-1.json", Body=body[: body.index(b"traceEv")])
    data = open_job("s3://named/run", cache_dir=tmp_path / "cache")
    with caplog.at_level("WARNING"):
        assert data.connect().execute("SELECT count(*) FROM events").fetchone() == (5,)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3  # trace.json: an event of 1970, no rank; rank-1.json: cut
    for warning in warnings:
        assert "s3://named/run/" in warning and tempfile.gettempdir() not in warning, warning
    ranks = data.metadata["ranks"]
    assert ranks[0]["kineto"]["path"] == "s3://named/run/trace.json"


def _moto_recorder(endpoint: str, action: str) -> str:
    """Start, stop or download moto's recording of the requests it serves."""
    method = "GET" if action == "download" else "POST"
    url = f"{endpoint}/moto-api/recorder/{action}-recording"
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
        return r.read().decode()


def test_json_files_in_a_folder_of_traces_on_s3_are_told_apart_by_their_first_bytes(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each one was downloaded whole to sniff it: a JSON file of another kind at every refresh.
    monkeypatch.chdir(tmp_path)  # where moto writes its recording
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="sniffed")
    trace = synthetic.write_trace(tmp_path)
    client.upload_file(str(trace), "sniffed", f"run/{trace.name}")
    other = json.dumps({"files": ["x" * 100] * 20_000}).encode()
    client.put_object(Bucket="sniffed", Key="run/dataset.json", Body=other)
    _moto_recorder(s3_endpoint, "start")
    try:
        data = open_job("s3://sniffed/run", cache_dir=tmp_path / "cache")
        assert data.refresh() is True and data.refresh() is False
        requests = [
            json.loads(line) for line in _moto_recorder(s3_endpoint, "download").splitlines()
        ]
    finally:
        _moto_recorder(s3_endpoint, "stop")
    assert data.last_refresh_files == [] and data.metadata["ranks"][0]["kineto"]["event_count"]
    ranges = [
        r["headers"].get("Range", "")
        for r in requests
        if r["method"] == "GET" and r["url"].endswith("/run/dataset.json")
    ]
    assert len(ranges) == 3  # the folder's kind, then one look per refresh
    assert all(r.startswith("bytes=0-") for r in ranges), ranges  # none of the whole file
    assert all(int(r.removeprefix("bytes=0-")) < len(other) // 4 for r in ranges), ranges

"""Fixtures for the UI tests: jobs built by hand in memory, job folders and app factories.

The jobs are ``stepscope.testing.TableJob`` over small tables (a minute of CPU and GPU samples,
steps with a forward pass each), so API behaviour is tested without depending on how the store
reads raw files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from stepscope.testing import TableJob, event_row
from stepscope.ui import create_app

T0_US = 1_700_000_000_000_000

#: Every event of the UI's jobs comes from thread 1 of process 1 of the Python timeline.
_EVENT_FIELDS: dict[str, Any] = {"source": "pythontimeline", "pid": 1, "tid": 1, "args": "{}"}


def system_rows(
    seconds: int = 60, cpus: int = 4, gpus: int = 2, node: str = "algo-1"
) -> list[dict[str, Any]]:
    rows = []
    for t in range(seconds):
        ts = T0_US + t * 1_000_000
        for c in range(cpus):
            rows.append(
                {
                    "timestamp_us": ts,
                    "node": node,
                    "type": "cpu",
                    "name": f"cpu{c}",
                    "dimension": "CPUUtilization",
                    "value": float((t * 7 + c * 13) % 100),
                }
            )
        for g in range(gpus):
            rows.append(
                {
                    "timestamp_us": ts,
                    "node": node,
                    "type": "gpu",
                    "name": f"gpu{g}",
                    "dimension": "GPUUtilization",
                    "value": 0.0 if t % 5 == 0 else 70.0 + g,
                }
            )
    return rows


def step_events(steps: int = 50, node: str = "algo-1") -> list[dict[str, Any]]:
    rows = []
    for s in range(steps):
        start = T0_US + s * 300_000.0
        dur = 250_000.0 if s % 10 else 900_000.0
        rows.append(
            event_row(
                **_EVENT_FIELDS,
                node=node,
                category="Step:ModeKeys.TRAIN",
                name="Step:ModeKeys.TRAIN",
                start_us=start,
                dur_us=dur,
                step=s,
            )
        )
        rows.append(
            event_row(
                **_EVENT_FIELDS,
                node=node,
                category="Annotation",
                name="Forward",
                start_us=start,
                dur_us=dur / 3,
                step=s,
            )
        )
    return rows


def write_job_folder(root: Path, name: str, *, status: str = "Completed", **extra: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    meta = {
        "name": name,
        "command": ["python", "train.py", "--epochs", "3"],
        "status": status,
        "start_time_us": T0_US,
        "end_time_us": T0_US + 60_000_000 if status != "Running" else None,
        "nodes": ["algo-1"],
        "hosts": {"algo-1": "trainbox"},
        "hardware": {
            "algo-1": {
                "cpu_model": "Test CPU",
                "cpu_count": 4,
                "memory_bytes": 16 * 2**30,
                "gpus": [{"index": 0, "name": "Test GPU", "memory_bytes": 8 * 2**30}],
            }
        },
        "ranks": {"0": {"node": "algo-1", "pid": 4242, "clock_offset_us": 0.0}},
        "versions": {"python": "3.11.2", "torch": "2.13.0", "stepscope": "0.1.0"},
        "hyperparameters": {"lr": 0.1, "batch_size": 32},
        "profiler_config": {"system_monitor_interval_millis": 500},
        **extra,
    }
    (folder / "job.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture
def jobs_root(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    root.mkdir()
    return root


@pytest.fixture
def table_opener() -> Callable[[Path], TableJob]:
    def open_table_job(path: Path) -> TableJob:
        job_json = (
            json.loads((path / "job.json").read_text()) if (path / "job.json").is_file() else None
        )
        # the shape JobData.metadata has: job.json nested, nodes and ranks recovered beside it
        metadata = {
            "job": job_json,
            "status": (job_json or {}).get("status", "Completed"),
            "nodes": ["algo-1"],
            "ranks": {0: {"node": "algo-1", **((job_json or {}).get("ranks") or {}).get("0", {})}},
            "first_timestamp_us": T0_US,
            "last_timestamp_us": T0_US + 60_000_000,
        }
        return TableJob(path, system_rows(), step_events(), metadata)

    return open_table_job


@pytest.fixture
def make_client(
    tmp_path: Path, table_opener: Callable[[Path], TableJob]
) -> Callable[..., TestClient]:
    def make(roots: list[Path], **kwargs: Any) -> TestClient:
        kwargs.setdefault("settings_path", tmp_path / "config" / "ui-settings.json")
        kwargs.setdefault("job_opener", table_opener)
        return TestClient(create_app(roots, **kwargs), base_url="http://127.0.0.1")

    return make


def load_and_wait(client: TestClient, job_id: str, *, deadline_s: float = 120.0) -> dict[str, Any]:
    """Load a job through the API and wait (generously) until it is loaded or failed."""
    import time

    response = client.post(f"/api/jobs/{job_id}/load")
    assert response.status_code == 202, response.text
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        loaded = {p["id"]: p for p in client.get("/api/loaded").json()["loaded"]}
        if loaded[job_id]["state"] != "loading":
            return loaded[job_id]
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still loading after {deadline_s} s")


def job_ids(client: TestClient) -> dict[str, str]:
    """Job name -> id, from the job list."""
    return {job["name"]: job["id"] for job in client.get("/api/jobs").json()["jobs"]}

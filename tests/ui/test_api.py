"""The JSON API the front end uses: job list, load/unload, dashboard panels, info, rules, settings.

Most tests run against a job double over small Arrow tables (``TableJob``), so they check what the
API promises independently of the readers; the last ones go through the real store.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from stepscope.store.layout import job_end_marker_paths
from stepscope.testing import generate_job
from stepscope.ui.panels import MAX_ANNOTATION_CHARS

from .conftest import T0_US, job_ids, load_and_wait, write_job_folder

PANELS = [
    "gpu_active_time",
    "gpu_utilization",
    "cpu_active_time",
    "cpu_utilization",
    "kernel_time_all",
    "kernel_time_top",
    "kernel_launches_all",
    "kernel_launches_top",
    "step_time",
    "kernel_precision",
    "gpu_activity",
    "memory_operations",
    "step_breakdown",
    "annotation_histogram",
]


@pytest.fixture
def client(jobs_root: Path, make_client):
    write_job_folder(jobs_root, "job-a")
    write_job_folder(jobs_root, "job-b", status="Running")
    return make_client([jobs_root])


def test_job_list_shows_name_status_start_duration_nodes_and_load_state(client):
    jobs = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}
    assert set(jobs) == {"job-a", "job-b"}
    a = jobs["job-a"]
    assert (a["status"], a["start_us"], a["duration_s"], a["nodes"], a["load_state"]) == (
        "completed",
        T0_US,
        60.0,
        ["algo-1"],
        "not_loaded",
    )
    assert jobs["job-b"]["status"] == "running"
    # so far, by the server's clock
    assert jobs["job-b"]["duration_s"] == pytest.approx(time.time() - T0_US / 1e6, abs=60)


def test_load_then_unload(client):
    ids = job_ids(client)
    profile = load_and_wait(client, ids["job-a"])
    assert profile["state"] == "loaded"
    assert profile["location"] == "job-a"  # as in the job list: it tells apart jobs of one name
    assert {j["name"]: j["load_state"] for j in client.get("/api/jobs").json()["jobs"]} == {
        "job-a": "loaded",
        "job-b": "not_loaded",
    }
    assert client.delete(f"/api/jobs/{ids['job-a']}/load").status_code == 204
    assert client.get("/api/loaded").json() == {"loaded": []}
    assert client.delete(f"/api/jobs/{ids['job-a']}/load").status_code == 404
    response = client.get(f"/api/jobs/{ids['job-a']}/dashboard/step_time")
    assert response.status_code == 409 and "Load" in response.json()["detail"]


def test_panel_list_names_every_dashboard_panel_in_order(client):
    body = client.get("/api/panels").json()
    assert [p["name"] for p in body["panels"]] == PANELS
    assert {p["name"] for p in body["panels"] if p["uses_k"]} == {
        "kernel_time_all",
        "kernel_launches_all",
    }
    assert (body["default_k"], body["max_k"]) == (15, 100)


def test_dashboard_panels_of_a_loaded_job(client):
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)

    gpu = client.get(f"/api/jobs/{job}/dashboard/gpu_active_time").json()
    assert gpu["kind"] == "pies" and gpu["title"] == "GPU active time"
    (pie,) = gpu["pies"]
    assert pie["title"] == "algo-1" and pie["labels"] == ["Active", "Idle"]
    # the double records 0 % on every 5th second of 60 for 2 GPUs: 12 of 60 samples idle per GPU
    active, idle = pie["values"]
    assert active / (active + idle) == pytest.approx(48 / 60)
    assert "80.0 %" in pie["hover"][0]

    cpu = client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()
    assert cpu["kind"] == "lines" and [s["name"] for s in cpu["series"]] == ["algo-1"]
    assert len(cpu["series"][0]["x"]) == 60  # 60 one-second samples fit in the point budget

    steps = client.get(f"/api/jobs/{job}/dashboard/step_time").json()
    assert steps["kind"] == "histogram" and steps["unit"] == "ms"
    (train,) = steps["series"]
    assert train["name"] == "TRAIN"
    assert sum(train["counts"]) == 50 == train["stats"]["count"]
    assert train["stats"]["max"] == 900.0 and train["stats"]["median"] == 250.0
    assert len(steps["edges"]) == len(train["counts"]) + 1 <= 41

    kernels = client.get(f"/api/jobs/{job}/dashboard/kernel_time_all").json()
    assert kernels["empty"] is True and "kernel" in kernels["message"].lower()


def test_every_panel_answers_data_or_a_plain_message(client):
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)
    for panel in PANELS:
        params = {"annotation": "Forward"} if panel == "annotation_histogram" else {}
        response = client.get(f"/api/jobs/{job}/dashboard/{panel}", params=params)
        assert response.status_code in (200, 404), (panel, response.text)
        if response.status_code == 200:
            body = response.json()
            assert body["panel"] == panel
            assert body["empty"] is False or body["message"], panel


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs/0123456789abcdef0123/load",  # well-formed but unknown
        "/api/jobs/not-an-id/info",
        "/api/jobs/..%2F..%2Fetc%2Fpasswd/load",
        "/api/jobs/%2e%2e%2f%2e%2e%2fetc%2fpasswd/info",
        "/api/jobs/..%252F..%252Fetc%252Fpasswd/info",
        "/api/jobs/../../etc/passwd",
        "/api/jobs/%2Fetc%2Fpasswd/dashboard/step_time",
        "/static/../../../../etc/passwd",
        "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/..%2f..%2f..%2fpyproject.toml",
        "/vendor/..%2f..%2fetc%2fpasswd",
    ],
)
def test_hostile_ids_and_paths_are_refused(client, path):
    for method in ("GET", "POST", "DELETE"):
        response = client.request(method, path)
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
        assert "root:" not in response.text and "[project]" not in response.text


def test_unknown_job_ids_are_not_found(client):
    unknown = "0123456789abcdef0123"
    assert client.post(f"/api/jobs/{unknown}/load").status_code == 404
    assert client.get(f"/api/jobs/{unknown}/info").status_code == 404
    assert client.get(f"/api/jobs/{unknown}/dashboard/step_time").status_code == 404
    assert client.get(f"/api/jobs/{unknown}/rules").status_code == 404
    assert client.post("/api/jobs/..%2F..%2Fetc%2Fpasswd/load").status_code == 404


def test_bad_panel_parameters_are_refused(client):
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)
    assert client.get(f"/api/jobs/{job}/dashboard/no_such_panel").status_code == 404
    for k, words in (("0", "greater than or equal to 1"), ("101", "less than or equal to 100")):
        response = client.get(f"/api/jobs/{job}/dashboard/kernel_time_all?k={k}")
        assert response.status_code == 422
        # the documented error shape: one string naming the parameter and what is allowed
        assert response.json() == {"detail": f"k: Input should be {words}."}
    response = client.get(f"/api/jobs/{job}/dashboard/kernel_time_all?k=ten")
    assert response.status_code == 422 and response.json()["detail"].startswith("k: ")
    response = client.get(
        f"/api/jobs/{job}/dashboard/annotation_histogram",
        params={"annotation": "x" * (MAX_ANNOTATION_CHARS + 1)},
    )
    assert response.status_code == 422


def test_an_annotation_histogram_without_its_annotation_names_the_parameter(client):
    # "404 No annotation of that name in this job." read as if the job had lost it
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)
    for params in ({}, {"annotation": ""}):
        response = client.get(f"/api/jobs/{job}/dashboard/annotation_histogram", params=params)
        assert response.status_code == 422, params
        detail = response.json()["detail"]
        assert detail.startswith("annotation: Field required")
        assert f"/api/jobs/{job}/annotations" in detail
    response = client.get(
        f"/api/jobs/{job}/dashboard/annotation_histogram", params={"annotation": "Nope"}
    )
    assert response.status_code == 404


def test_timeline_windows_beyond_finite_times_are_refused(client):
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)
    tracks = ",".join(
        t["id"] for t in client.get(f"/api/jobs/{job}/timeline/tracks").json()["tracks"]
    )
    for start, end in (("0", "inf"), ("-inf", "0"), ("nan", "1"), ("0", "1e400")):
        for endpoint in ("window", "stats"):
            response = client.get(
                f"/api/jobs/{job}/timeline/{endpoint}",
                params={"start_us": start, "end_us": end, "tracks": tracks},
            )
            assert response.status_code == 422, (endpoint, start, end, response.text[:200])
            assert "start_us and end_us" in response.json()["detail"]


def test_timeline_find_names_the_next_matching_slice_and_refuses_bad_questions(client):
    job = job_ids(client)["job-a"]
    load_and_wait(client, job)
    found = client.get(
        f"/api/jobs/{job}/timeline/find", params={"text": "forward", "after_us": T0_US + 1}
    ).json()
    assert found["count"] == 50  # one Forward per step
    assert found["match"]["name"] == "Forward"
    assert found["match"]["start_us"] == T0_US + 300_000
    for params in ({"text": "", "after_us": 0}, {"text": "x", "after_us": "nan"}):
        response = client.get(f"/api/jobs/{job}/timeline/find", params=params)
        assert response.status_code == 422, params


def test_information_of_a_loaded_job(client):
    job = job_ids(client)["job-a"]
    assert client.get(f"/api/jobs/{job}/info").status_code == 409
    load_and_wait(client, job)
    info = client.get(f"/api/jobs/{job}/info").json()
    sections = {s["title"]: s for s in info["sections"]}
    rows = {k: v for k, v in sections["Job"]["rows"]}
    assert rows["Command"] == "python train.py --epochs 3"
    assert rows["Status"] == "Completed"
    hardware = sections["Nodes and hardware"]
    assert hardware["table"] == [
        ["algo-1", "trainbox", "Test CPU", 4, "16.0 GiB", "Test GPU (8.0 GiB)"]
    ]
    assert dict(sections["Hyperparameters"]["rows"]) == {"lr": 0.1, "batch_size": 32}
    assert dict(sections["Framework and library versions"]["rows"])["torch"] == "2.13.0"
    data = dict(sections["Data"]["rows"])
    assert data["System metric samples"] == "360"  # 60 s of 4 CPUs and 2 GPUs
    assert data["Ranks with data"] == "rank 0"  # the list of ranks, not a count of none


def test_rule_statuses_and_report(client, jobs_root: Path):
    job = job_ids(client)["job-a"]
    assert client.get(f"/api/jobs/{job}/rules").json() == {"rules": [], "report_url": None}
    assert client.get(f"/api/jobs/{job}/report").status_code == 404
    rule_output = jobs_root / "job-a" / "rule-output"
    (rule_output / "CPUBottleneck").mkdir(parents=True)
    (rule_output / "CPUBottleneck" / "status.json").write_text(
        json.dumps(
            {
                "rule": "CPUBottleneck",
                "status": "IssuesFound",
                "message": "CPU bound 12 times",
                "triggered": 12,
                "violations": 12,
                "datapoints": 300,
                "updated_us": T0_US,
            }
        )
    )
    (rule_output / "LowGPUUtilization").mkdir()
    (rule_output / "LowGPUUtilization" / "status.json").write_text('{"status": "InPro')
    (rule_output / "profiler-report.html").write_text("<html><body>report</body></html>")
    body = client.get(f"/api/jobs/{job}/rules").json()
    assert body["report_url"] == f"/api/jobs/{job}/report"
    assert [(r["rule"], r["status"]) for r in body["rules"]] == [
        ("CPUBottleneck", "IssuesFound"),
        ("LowGPUUtilization", "Unknown"),  # half-written status file: listed, not hidden
    ]
    assert body["rules"][0]["triggered"] == 12
    report = client.get(body["report_url"])
    assert report.status_code == 200 and "report" in report.text


def test_a_rule_left_in_progress_by_a_job_that_no_longer_runs_is_stopped(
    jobs_root: Path, make_client
):
    from stepscope.store.job_status import process_identity

    # the engine's last scan said InProgress; then it was killed with its job (kill -9 of the
    # whole process group) before its final pass
    write_job_folder(jobs_root, "killed", status="Running", launcher=_ended_process())
    write_job_folder(jobs_root, "training", status="Running", launcher=process_identity())
    for name in ("killed", "training"):
        folder = jobs_root / name / "rule-output" / "StepOutlier"
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(
            json.dumps({"rule": "StepOutlier", "status": "InProgress", "updated_us": T0_US})
        )
    client = make_client([jobs_root])
    ids = job_ids(client)

    def rule_status(name: str) -> str:
        (rule,) = client.get(f"/api/jobs/{ids[name]}/rules").json()["rules"]
        return str(rule["status"])

    assert rule_status("killed") == "Stopped"
    assert rule_status("training") == "InProgress"


def test_settings_persist_and_bad_values_are_named(tmp_path: Path, jobs_root: Path, make_client):
    settings_file = tmp_path / "settings" / "ui.json"
    client = make_client([jobs_root], settings_path=settings_file)
    assert client.get("/api/settings").json() == {
        "auto_shutdown_enabled": True,
        "auto_shutdown_threshold_hours": 2.0,
    }
    saved = client.put("/api/settings", json={"auto_shutdown_enabled": False}).json()
    assert saved == {"auto_shutdown_enabled": False, "auto_shutdown_threshold_hours": 2.0}
    client.put("/api/settings", json={"auto_shutdown_threshold_hours": 6.5})
    assert json.loads(settings_file.read_text()) == {
        "auto_shutdown_enabled": False,
        "auto_shutdown_threshold_hours": 6.5,
    }
    reopened = make_client([jobs_root], settings_path=settings_file)
    assert reopened.get("/api/settings").json()["auto_shutdown_threshold_hours"] == 6.5
    for bad, words in (
        ({"auto_shutdown_threshold_hours": 0}, "greater than 0"),
        ({"auto_shutdown_threshold_hours": "two"}, "threshold_hours"),
        ({"auto_shutdown_enabled": "yes"}, "true or false"),
        ({"shutdown": True}, "auto_shutdown_enabled"),
        ([True], "the request body: Input should be a valid dictionary"),
    ):
        response = client.put("/api/settings", json=bad)
        assert response.status_code == 422 and words in response.json()["detail"], bad
    assert client.get("/api/settings").json()["auto_shutdown_threshold_hours"] == 6.5


def test_a_refused_setting_is_named_as_the_settings_page_labels_it(jobs_root: Path, make_client):
    client = make_client([jobs_root])
    # an emptied number field reaches the server as null
    detail = client.put("/api/settings", json={"auto_shutdown_threshold_hours": None}).json()
    assert detail["detail"].startswith("Auto shutdown threshold in hours")
    assert "got nothing" in detail["detail"]
    assert "UISettings" not in detail["detail"] and "None" not in detail["detail"]
    detail = client.put("/api/settings", json={"auto_shutdown_enabled": "yes"}).json()
    assert detail["detail"].startswith("Enable app auto shutdown")
    assert 'got "yes"' in detail["detail"]


def test_a_body_that_is_not_json_is_refused_as_such(jobs_root: Path, make_client):
    client = make_client([jobs_root])
    response = client.put(
        "/api/settings", content=b"{hours: 3", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith("The request body is not valid JSON")


def test_pages_and_the_bundled_plotly_are_served(client):
    for page in ("/", "/dashboard", "/timeline", "/info", "/settings"):
        response = client.get(page)
        assert response.status_code == 200 and "/static/js/main.js" in response.text
        assert "default-src 'self'" in response.headers["content-security-policy"]
    plotly = client.get("/vendor/plotly.min.js")
    assert plotly.status_code == 200 and "plotly" in plotly.text[:2000].lower()
    assert client.get("/static/js/dashboard.js").status_code == 200


def test_a_running_job_is_refreshed_and_shows_new_data(tmp_path: Path, make_client, table_opener):
    """Loading a running job shows the data so far; later requests reread new data."""
    root = tmp_path / "live"
    root.mkdir()
    write_job_folder(root, "live-job", status="Running")
    opened = []

    def opener(path):
        job = table_opener(path)
        opened.append(job)
        return job

    client = make_client([root], job_opener=opener, refresh_interval_s=0.0)
    job = job_ids(client)["live-job"]
    load_and_wait(client, job)
    client.get(f"/api/jobs/{job}/dashboard/step_time")
    client.get(f"/api/jobs/{job}/dashboard/step_time")
    assert opened[0].refreshes >= 3  # the load, then once per dashboard request


def test_the_real_store_serves_a_generated_job(tmp_path: Path, make_client):
    root = tmp_path / "jobs"
    generate_job(root / "generated", gpus=2, cpus=4, minutes=2)
    from stepscope.store import open_job

    client = make_client([root], job_opener=open_job)
    job = job_ids(client)["generated"]
    assert load_and_wait(client, job)["state"] == "loaded"
    gpu = client.get(f"/api/jobs/{job}/dashboard/gpu_utilization").json()
    assert gpu["kind"] == "lines" and gpu["series"][0]["name"] == "algo-1"
    assert len(gpu["series"][0]["x"]) <= 600
    steps = client.get(f"/api/jobs/{job}/dashboard/step_time").json()
    assert steps["kind"] == "histogram" and steps["series"][0]["stats"]["count"] > 100
    info = client.get(f"/api/jobs/{job}/info").json()
    assert "Nodes and hardware" in {s["title"] for s in info["sections"]}


def test_a_loaded_job_without_job_json_shows_when_its_data_ran(tmp_path: Path, make_client):
    """Before loading, a folder of profiler output alone (``stepscope.profile()``, smprof, a
    SageMaker download) is timed by the whole minutes its system files are named after; once
    loaded, by its data."""
    from stepscope.store import open_job

    root = tmp_path / "jobs"
    start_s = 1_700_000_070  # half a minute into the minute its first system file is named after
    job_dir = generate_job(root / "notebook", gpus=0, cpus=1, minutes=1, start_time_s=start_s)
    (job_dir / "job.json").unlink()
    client = make_client([root], job_opener=open_job)
    job = job_ids(client)["notebook"]
    listed = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["notebook"]
    assert listed["start_us"] == (start_s - 30) * 1e6  # the minute, before loading
    loaded = load_and_wait(client, job)
    assert loaded["state"] == "loaded"
    # the generated job's first sample is at its start; it runs for a minute
    assert loaded["start_us"] == start_s * 1e6
    assert loaded["duration_s"] == pytest.approx(60.0, abs=1.0)
    assert loaded["end_us"] == pytest.approx(loaded["start_us"] + loaded["duration_s"] * 1e6)
    listed = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["notebook"]
    assert [listed[key] for key in ("start_us", "end_us", "duration_s")] == [
        loaded[key] for key in ("start_us", "end_us", "duration_s")
    ]
    info = client.get(f"/api/jobs/{job}/info").json()["sections"][0]["rows"]
    assert dict(map(tuple, info))["Start"] == "2023-11-14 22:14:30 UTC"  # start_s, in UTC


def _kineto_trace(
    path: Path, *, first_ts: float, base_ns: int | None = None, **header: Any
) -> None:
    """A trace of one profiler step from ``first_ts``; with ``base_ns``, written as newer
    Kineto does: times relative to the ``baseTimeNanoseconds`` that follows the events."""
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 1,
            "tid": 1,
            "ts": first_ts,
            "dur": 1_000_000,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": first_ts + 10,
            "dur": 500,
        },
    ]
    document: dict[str, Any] = {"schemaVersion": 1, **header, "traceEvents": events}
    if base_ns is not None:
        document["baseTimeNanoseconds"] = base_ns
    data = json.dumps(document).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def test_trace_jobs_are_listed_newest_first_with_their_ranks_before_loading(
    tmp_path: Path, make_client
):
    """A trace's start is read from its first bytes; one dated only at its end (a newer
    compressed trace) goes by when its file was written until it is loaded, then by its start."""
    from stepscope.store import open_job

    root = tmp_path / "jobs"
    year_us = {
        year: datetime(year, 6, 1, tzinfo=timezone.utc).timestamp() * 1e6
        for year in (2019, 2020, 2022, 2024, 2030)
    }
    write_job_folder(root, "job-2023")  # starts at T0_US, in November 2023
    _kineto_trace(root / "dated-2030.json", first_ts=year_us[2030])
    _kineto_trace(root / "old-2020.json.gz", first_ts=year_us[2020])
    for rank in (0, 1):
        info = {"backend": "nccl", "rank": rank, "world_size": 4}
        _kineto_trace(
            root / "ddp" / f"rank-{rank}.json.gz", first_ts=year_us[2024], distributedInfo=info
        )
    undated = root / "undated.json.gz"  # ran in 2019, written in 2022
    _kineto_trace(undated, first_ts=1e9, base_ns=int((year_us[2019] - 1e9) * 1e3))
    os.utime(undated, (year_us[2022] / 1e6, year_us[2022] / 1e6))
    client = make_client([root], job_opener=open_job)

    jobs = client.get("/api/jobs").json()["jobs"]
    assert [j["name"] for j in jobs] == ["dated-2030", "ddp", "job-2023", "undated", "old-2020"]
    listed = {j["name"]: j for j in jobs}
    assert listed["dated-2030"]["start_us"] == year_us[2030]
    assert listed["undated"]["start_us"] is None
    assert listed["undated"]["written_us"] == year_us[2022]
    assert (listed["ddp"]["ranks"], listed["ddp"]["world_size"]) == ([0, 1], 4)
    assert (listed["dated-2030"]["ranks"], listed["dated-2030"]["world_size"]) == ([None], None)
    assert listed["job-2023"]["nodes"] == ["algo-1"] and listed["job-2023"]["ranks"] == []

    assert load_and_wait(client, listed["undated"]["id"])["start_us"] == year_us[2019]
    jobs = client.get("/api/jobs").json()["jobs"]
    assert [j["name"] for j in jobs] == ["dated-2030", "ddp", "job-2023", "old-2020", "undated"]


def test_a_loaded_trace_starts_when_its_data_does_on_every_page(
    tmp_path: Path, make_client, shared_fixtures: Path, monkeypatch
):
    """Listed, a trace's start is its first bytes' earliest event; loaded, its data's."""
    from stepscope.store import open_job

    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    client = make_client([shared_fixtures / "kineto" / "two_ranks_one_job"], job_opener=open_job)
    job = job_ids(client)["two_ranks_one_job"]
    loaded = load_and_wait(client, job)
    sections = client.get(f"/api/jobs/{job}/info").json()["sections"]
    rows = {label: value for section in sections for label, value in section.get("rows", [])}
    assert rows["Start"] == rows["First record"] == "2023-04-28 23:51:37 UTC"
    listed = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["two_ranks_one_job"]
    assert listed["start_us"] == loaded["start_us"]


def _training_so_far(root: Path, later: Path) -> tuple[Path, Callable[[], None]]:
    """A generated job as it is while training: running, only its first minute written.

    Returns the job folder and a function writing the rest of its system metrics.
    """
    job_dir = generate_job(root / "training", gpus=1, cpus=2, minutes=3)
    meta = json.loads((job_dir / "job.json").read_text())
    (job_dir / "job.json").write_text(
        json.dumps({**meta, "status": "Running", "end_time_us": None})
    )
    for marker in job_end_marker_paths(job_dir / "profiler-output"):  # none while it trains
        marker.unlink(missing_ok=True)
    system_files = sorted((job_dir / "profiler-output" / "system").rglob("*.algo-1.json"))
    later.mkdir()
    for path in system_files[1:]:
        path.rename(later / path.name)

    def write_the_rest() -> None:
        for path in system_files[1:]:
            (later / path.name).rename(path)

    return job_dir, write_the_rest


@pytest.mark.parametrize("recorded_by", ["stepscope run", "SageMaker Debugger"])
def test_a_running_job_shows_data_so_far_then_new_data(
    tmp_path: Path, make_client, recorded_by: str
):
    """Through the real store: load while the job runs, then new minute files appear. Output
    SageMaker Debugger is still writing (copied while its job trains: no job.json, no end
    marker yet) was listed as completed from its first system file on, and never refreshed."""
    from stepscope.store import open_job

    root = tmp_path / "jobs"
    job_dir, write_the_rest = _training_so_far(root, tmp_path / "later")
    if recorded_by == "SageMaker Debugger":
        (job_dir / "job.json").unlink()
    client = make_client([root], job_opener=open_job, refresh_interval_s=0.0)
    job = job_ids(client)["training"]
    listed = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["training"]
    assert listed["status"] == "running"
    assert load_and_wait(client, job)["state"] == "loaded"
    so_far = client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()
    assert max(so_far["series"][0]["x"]) < 60

    write_the_rest()
    now = client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()
    assert max(now["series"][0]["x"]) > 120


def _ended_process() -> dict[str, object]:
    """A launcher that has ended: a real process, started and waited for."""
    code = (
        "import json; from stepscope.store.job_status import process_identity; "
        "print(json.dumps(process_identity()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    identity: dict[str, object] = json.loads(done.stdout)
    return identity


def test_the_list_and_the_information_page_tell_a_job_whose_launcher_is_gone(
    jobs_root: Path, make_client
):
    from stepscope.store import open_job
    from stepscope.store.job_status import process_identity

    this_process = process_identity()
    write_job_folder(jobs_root, "killed", status="Running", launcher=_ended_process())
    # its pid runs another process now, started an hour after the launcher
    reused = {**this_process, "start_time": this_process["start_time"] - 3600}
    if "start_ticks" in this_process:  # Linux: its start in clock ticks since boot
        reused["start_ticks"] = this_process["start_ticks"] - 3600 * os.sysconf("SC_CLK_TCK")
    write_job_folder(jobs_root, "reused", status="Running", launcher=reused)
    training = write_job_folder(jobs_root, "training", status="Running", launcher=this_process)
    client = make_client([jobs_root], job_opener=open_job)
    ids = job_ids(client)
    listed = {j["name"]: j["status"] for j in client.get("/api/jobs").json()["jobs"]}
    assert listed == {"killed": "failed", "reused": "failed", "training": "running"}

    def status_row(name: str) -> str:
        info = client.get(f"/api/jobs/{ids[name]}/info").json()
        return dict(info["sections"][0]["rows"])["Status"]

    for name in listed:
        load_and_wait(client, ids[name])
    assert status_row("killed").startswith("Failed (its launcher (pid ")
    assert status_row("reused").startswith("Failed")
    assert status_row("training") == "Running"
    # the job completes without new data: its Information page follows the job list
    meta = json.loads((training / "job.json").read_text())
    (training / "job.json").write_text(json.dumps({**meta, "status": "Completed"}))
    assert {j["name"]: j["status"] for j in client.get("/api/jobs").json()["jobs"]}[
        "training"
    ] == "completed"
    assert status_row("training") == "Completed"


def test_a_loaded_job_has_its_status_of_now_without_the_job_list_asked_again(
    jobs_root: Path, make_client
):
    from stepscope.store import open_job
    from stepscope.store.job_status import process_identity

    training = write_job_folder(
        jobs_root, "training", status="Running", launcher=process_identity()
    )
    client = make_client([jobs_root], job_opener=open_job)
    job = job_ids(client)["training"]
    load_and_wait(client, job)
    meta = json.loads((training / "job.json").read_text())
    (training / "job.json").write_text(json.dumps({**meta, "status": "Completed"}))
    # the Information page and the dashboard ask only for the job and the loaded profiles
    info = client.get(f"/api/jobs/{job}/info").json()
    assert dict(info["sections"][0]["rows"])["Status"] == "Completed"
    assert [p["status"] for p in client.get("/api/loaded").json()["loaded"]] == ["completed"]


def test_profiler_output_without_its_end_marker_has_one_status_in_the_list_and_information(
    tmp_path: Path, make_client
):
    """A recording copied without training_job_end.ts: nothing written lately, so completed."""
    from stepscope.store import open_job

    root = tmp_path / "jobs"
    job_dir, write_the_rest = _training_so_far(root, tmp_path / "later")
    write_the_rest()
    (job_dir / "job.json").unlink()
    an_hour_ago = time.time() - 3600
    for path in (job_dir / "profiler-output").rglob("*.json"):
        os.utime(path, (an_hour_ago, an_hour_ago))
    client = make_client([root], job_opener=open_job)
    job = job_ids(client)["training"]
    listed = {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["training"]
    load_and_wait(client, job)
    sections = {s["title"]: s for s in client.get(f"/api/jobs/{job}/info").json()["sections"]}
    assert listed["status"] == "completed"
    assert dict(map(tuple, sections["Job"]["rows"]))["Status"] == "Completed"
    assert open_job(job_dir).metadata["status"] == "Completed"  # and so says the store


def test_a_job_that_ends_after_it_was_loaded_shows_all_its_data(tmp_path: Path, make_client):
    """The data written between the last refresh and the job's end is read once it has ended."""
    from stepscope.store import open_job
    from stepscope.store.system_writer import write_job_end_marker

    root = tmp_path / "jobs"
    job_dir, write_the_rest = _training_so_far(root, tmp_path / "later")
    client = make_client([root], job_opener=open_job)  # refreshes at most every 5 s
    job = job_ids(client)["training"]
    assert load_and_wait(client, job)["state"] == "loaded"
    so_far = client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()
    assert max(so_far["series"][0]["x"]) < 60

    write_the_rest()
    write_job_end_marker(job_dir / "profiler-output")
    meta = json.loads((job_dir / "job.json").read_text())
    (job_dir / "job.json").write_text(json.dumps({**meta, "status": "Completed"}))
    # the dashboard's background poll of the job list sees the job end
    assert {j["name"]: j for j in client.get("/api/jobs").json()["jobs"]}["training"][
        "status"
    ] == "completed"
    now = client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()
    assert max(now["series"][0]["x"]) > 120


def test_rule_files_linking_outside_the_job_are_not_served(client, jobs_root: Path, tmp_path: Path):
    job = job_ids(client)["job-a"]
    secret = tmp_path / "secret.txt"
    secret.write_text('{"status": "NoIssuesFound", "message": "top secret"}')
    rule_output = jobs_root / "job-a" / "rule-output"
    (rule_output / "Leaky").mkdir(parents=True)
    os.symlink(secret, rule_output / "Leaky" / "status.json")
    os.symlink(secret, rule_output / "profiler-report.html")
    body = client.get(f"/api/jobs/{job}/rules").json()
    assert body == {"rules": [], "report_url": None}
    response = client.get(f"/api/jobs/{job}/report")
    assert response.status_code == 404 and "secret" not in response.text


def test_data_files_linking_outside_the_job_are_not_read(
    make_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # another job's files, outside the roots, linked into a listed job's data folders
    root = tmp_path / "jobs"
    job_dir = generate_job(root / "linked", gpus=1, cpus=1, minutes=2)
    outside = tmp_path / "outside"
    outside.mkdir()
    output = job_dir / "profiler-output"
    events = sorted((output / "framework" / "pevents").rglob("*pythontimeline.json"))[-1]
    (outside / events.name).write_text(events.read_text().replace('"name": "', '"name": "OUTSIDE '))
    events.unlink()
    events.symlink_to(outside / events.name)
    system = sorted((output / "system").rglob("*.json"))[-1]
    (outside / system.name).write_text(system.read_text().replace('"cpu0"', '"outsidecpu"'))
    system.unlink()
    system.symlink_to(outside / system.name)
    hour = outside / "2023111423"  # a whole folder of system files
    hour.mkdir()
    (hour / system.name).write_text((outside / system.name).read_text())
    (system.parent.parent / hour.name).symlink_to(hour)
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    client = make_client([root], job_opener=None)  # the UI's own way of opening a job
    job = job_ids(client)["linked"]
    assert load_and_wait(client, job)["state"] == "loaded"
    tracks = client.get(f"/api/jobs/{job}/timeline/tracks").json()["tracks"]
    assert not [t for t in tracks if "outsidecpu" in " ".join(t["path"])]
    find = f"/api/jobs/{job}/timeline/find"
    assert client.get(find, params={"text": "OUTSIDE", "after_us": 0}).json()["count"] == 0
    assert client.get(find, params={"text": "Step", "after_us": 0}).json()["count"] > 0


@pytest.mark.parametrize("link", [".stepscope", ".stepscope/cache"])
def test_a_cache_folder_linking_outside_the_roots_is_not_written(
    make_client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    link: str,
):
    root = tmp_path / "jobs"
    job_dir = generate_job(root / "linked-cache", gpus=1, cpus=1, minutes=1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (job_dir / link).parent.mkdir(exist_ok=True)
    (job_dir / link).symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    client = make_client([root], job_opener=None)  # the UI's own way of opening a job
    job = job_ids(client)["linked-cache"]
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        assert load_and_wait(client, job)["state"] == "loaded"
        assert client.get(f"/api/jobs/{job}/dashboard/step_time").json()["empty"] is False
    assert list(outside.iterdir()) == []
    assert list((tmp_path / "cache").iterdir())  # the job's cache went to the user cache
    said = [r.getMessage() for r in caplog.records if ".stepscope" in r.getMessage()]
    assert len(said) == 1 and "links outside" in said[0], said


def test_information_of_a_recorded_gpu_trace(shared_fixtures: Path, make_client, tmp_path: Path):
    from stepscope.store import open_job

    trace = shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz"
    client = make_client(
        [trace], job_opener=lambda path: open_job(path, cache_dir=tmp_path / "cache")
    )
    job = job_ids(client)["a100_rank0of2_nccl"]
    load_and_wait(client, job)
    sections = {s["title"]: s for s in client.get(f"/api/jobs/{job}/info").json()["sections"]}
    (rank,) = sections["Ranks"]["table"]
    columns = sections["Ranks"]["columns"]
    rank = dict(zip(columns, rank, strict=True))
    # distributedInfo and deviceProperties of the trace
    assert (rank["Rank"], rank["World size"], rank["Backend"]) == ("0", 2, "nccl")
    assert rank["Devices"] == "8 × NVIDIA A100-PG509-200 (39.4 GiB)"
    (traced,) = sections["PyTorch profiler traces"]["table"]
    traced = dict(zip(sections["PyTorch profiler traces"]["columns"], traced, strict=True))
    assert traced["File"] == "a100_rank0of2_nccl.json.gz"
    assert traced["Steps"] == "4–6 (3)"  # ProfilerStep#4-6


def test_information_says_what_the_reader_warned_about_a_trace(
    shared_fixtures: Path, make_client, tmp_path: Path
):
    """A trace cut short (a job killed while writing it): the page says what was lost and why."""
    import gzip

    from stepscope.store import open_job

    whole = gzip.decompress(
        (shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz").read_bytes()
    )
    root = tmp_path / "traces"
    root.mkdir()
    (root / "cut.pt.trace.json.gz").write_bytes(gzip.compress(whole[: len(whole) // 2]))
    client = make_client([root], job_opener=lambda p: open_job(p, cache_dir=tmp_path / "cache"))
    job = job_ids(client)["cut"]
    load_and_wait(client, job)
    sections = {s["title"]: s for s in client.get(f"/api/jobs/{job}/info").json()["sections"]}
    warned = sections["Trace warnings"]
    assert warned["columns"] == ["Rank", "Warning"]
    texts = [text for _, text in warned["table"]]
    assert any("ends early" in text for text in texts), texts
    assert any("own clock" in text for text in texts), texts
    assert not any(str(root) in text for text in texts)  # the File column names the file


def test_every_node_of_a_multi_node_job_has_its_own_line_and_pie(tmp_path: Path, make_client):
    from stepscope.store import open_job

    root = tmp_path / "jobs"
    generate_job(root / "two-nodes", nodes=2, gpus=2, cpus=2, minutes=1, low_gpu={0: 10.0})
    client = make_client([root], job_opener=open_job)
    job = job_ids(client)["two-nodes"]
    listed = client.get("/api/jobs").json()["jobs"][0]
    assert listed["nodes"] == ["algo-1", "algo-2"]
    load_and_wait(client, job)
    for kind in ("gpu", "cpu"):
        lines = client.get(f"/api/jobs/{job}/dashboard/{kind}_utilization").json()
        assert [s["name"] for s in lines["series"]] == ["algo-1", "algo-2"]
        pies = client.get(f"/api/jobs/{job}/dashboard/{kind}_active_time").json()
        assert [p["title"] for p in pies["pies"]] == ["algo-1", "algo-2"]


def test_the_job_list_is_bounded(jobs_root: Path, make_client):
    for i in range(1001):
        folder = jobs_root / f"job-{i:04d}"
        folder.mkdir()
        (folder / "job.json").write_text(json.dumps({"name": folder.name, "start_time_us": i}))
    body = make_client([jobs_root]).get("/api/jobs").json()
    assert len(body["jobs"]) == 1000 and body["truncated"] is True
    assert body["jobs"][0]["name"] == "job-1000"  # newest first


def test_step_time_counts_each_step_once_and_trace_steps_as_train(
    jobs_root: Path, make_client, table_opener
):
    """A rank with detailed-profiling windows has its steps twice: as Step events and as the
    ``ProfilerStep#N`` ranges of its traces; the panel showed the ranges as a second series. A
    rank with only a trace's ranges (a bare PyTorch profiler trace) has them as its TRAIN steps,
    as the rules and the statistics count them."""
    from stepscope.testing import TableJob, event_row

    from .conftest import step_events, system_rows

    def ranges(steps: range, node: str, rank: int) -> list[dict]:
        return [
            event_row(
                source="pt_trace",
                node=node,
                rank=rank,
                category="user_annotation",
                name=f"ProfilerStep#{s}",
                start_us=T0_US + s * 300_000.0,
                dur_us=240_000.0,
                step=s,
            )
            for s in steps
        ]

    def open_job(path: Path) -> TableJob:
        job = table_opener(path)
        events = step_events(50) + ranges(range(10, 20), "algo-1", 0)
        events += ranges(range(30), "algo-2", 1)
        return TableJob(path, system_rows(), events, job.metadata)

    write_job_folder(jobs_root, "detailed")
    client = make_client([jobs_root], job_opener=open_job)
    job = job_ids(client)["detailed"]
    load_and_wait(client, job)
    steps = client.get(f"/api/jobs/{job}/dashboard/step_time").json()
    assert [s["name"] for s in steps["series"]] == ["TRAIN"]
    assert steps["series"][0]["stats"]["count"] == 50 + 30


def test_an_annotation_outside_the_listed_names_still_gets_its_histogram(
    jobs_root: Path, make_client, table_opener
):
    # The drop-down lists the 500 names of largest total time; any other one typed in answered
    # "404 No annotation of that name in this job." although the job has it.
    from stepscope.testing import TableJob, event_row

    def open_job(path: Path) -> TableJob:
        job = table_opener(path)
        job.add(
            events=[
                event_row(
                    source="pythontimeline",
                    category="Annotation",
                    name=f"block-{n}",
                    start_us=T0_US + n * 1_000.0,
                    dur_us=1_000.0 - n,
                )
                for n in range(600)
            ]
        )
        return job

    write_job_folder(jobs_root, "many")
    client = make_client([jobs_root], job_opener=open_job)
    job = job_ids(client)["many"]
    load_and_wait(client, job)
    listed = client.get(f"/api/jobs/{job}/annotations").json()["annotations"]
    assert "block-599" not in listed and len(listed) == 500
    response = client.get(
        f"/api/jobs/{job}/dashboard/annotation_histogram", params={"annotation": "block-599"}
    )
    assert response.status_code == 200, response.text
    (series,) = response.json()["series"]
    assert series["name"] == "block-599" and series["stats"]["count"] == 1
    missing = client.get(
        f"/api/jobs/{job}/dashboard/annotation_histogram", params={"annotation": "block-600"}
    )
    assert missing.status_code == 404


def test_a_job_removed_while_loaded_is_said_to_be_gone_and_not_made_again(
    make_client, tmp_path: Path
):
    root = tmp_path / "jobs"
    job_dir = generate_job(root / "short-lived", gpus=1, cpus=1, minutes=1)
    client = make_client([root], job_opener=None)  # the UI's own way of opening a job
    job = job_ids(client)["short-lived"]
    assert load_and_wait(client, job)["state"] == "loaded"
    assert client.get(f"/api/jobs/{job}/dashboard/cpu_utilization").json()["empty"] is False
    shutil.rmtree(job_dir)
    (loaded,) = client.get("/api/loaded").json()["loaded"]
    assert loaded["removed"].startswith("'short-lived' was removed or moved")
    client.get("/api/jobs")  # the job list, read again, no longer has the job
    for path in ("dashboard/step_time", "annotations", "timeline/tracks", "info"):
        response = client.get(f"/api/jobs/{job}/{path}")
        assert response.status_code == 404, (path, response.text)
        assert response.json()["detail"].startswith(
            "'short-lived' was removed or moved after it was loaded: nothing is at "
            "'jobs/short-lived' any more. Unload it"
        )
    assert not job_dir.exists()
    assert client.delete(f"/api/jobs/{job}/load").status_code == 204


def test_loaded_profiles_stay_in_the_order_they_were_loaded_whichever_finishes_first(
    make_client, tmp_path: Path
):
    # rows that moved as loads ended put another profile under the pointer of a user picking one
    import threading

    from stepscope.store import open_job

    root = tmp_path / "jobs"
    for name in ("large", "small"):
        generate_job(root / name, gpus=1, cpus=1, minutes=1)
    small_loaded = threading.Event()

    def opener(path: Path):
        if path.name == "large":
            small_loaded.wait(60)  # reading a large job takes longer
        return open_job(path, cache_dir=tmp_path / "cache" / path.name)

    client = make_client([root], job_opener=opener)
    ids = job_ids(client)
    client.post(f"/api/jobs/{ids['large']}/load")
    assert load_and_wait(client, ids["small"])["state"] == "loaded"
    small_loaded.set()
    assert load_and_wait(client, ids["large"])["state"] == "loaded"
    names = [p["name"] for p in client.get("/api/loaded").json()["loaded"]]
    assert names == ["large", "small"]

"""Exports of every recorded trace validate: nested tracks, flows on slices, no span lost."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from stepscope.export import export_trace
from tests.export.tracecheck import check_chrome, check_perfetto, load_chrome

KINETO = [
    "a100_rank0of2_nccl.json.gz",
    "v100_single_ns_resolution.pt.trace.json.gz",
    "a100_triton.json.gz",
    "mi250_rocm.json.gz",
    "a100_alexnet_cuda_sync.json.gz",
    "cpu_only_gloo_rank34of300.json.gz",
    "legacy_2021_gpu_metrics_input.json",
    "two_ranks_one_job",
]


def _spans(path: Path) -> int:
    """Complete events in the raw trace(s), counted with the standard library."""
    files = sorted(path.glob("*.json.gz")) if path.is_dir() else [path]
    total = 0
    for file in files:
        opener = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rt") as f:
            events = json.load(f)["traceEvents"]
        total += sum(1 for e in events if e.get("ph") == "X")
    return total


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", KINETO)
def test_every_kineto_fixture_exports_to_valid_traces(
    name: str, shared_fixtures: Path, tmp_path: Path
) -> None:
    source = shared_fixtures / "kineto" / name
    spans = _spans(source)
    chrome = export_trace(source, tmp_path / "t.json.gz", format="chrome")
    counts = check_chrome(load_chrome(tmp_path / "t.json.gz"))
    assert counts["slices"] == chrome.slices == spans, "a span was lost or invented"
    perfetto = export_trace(source, tmp_path / "t.pftrace", format="perfetto")
    decoded = check_perfetto(tmp_path / "t.pftrace")
    assert decoded["slices"] == perfetto.slices == spans
    assert decoded["flows"] == counts["flows"] == chrome.flows


def test_launches_of_a_gpu_trace_become_flows(shared_fixtures: Path, tmp_path: Path) -> None:
    source = shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz"
    with gzip.open(source, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = {
        e["args"]["correlation"]
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    }
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in ("cuda_runtime", "cuda_driver")
        and "correlation" in e.get("args", {})
    }
    summary = export_trace(source, tmp_path / "t.json", format="chrome")
    assert summary.flows == len(kernels & launches) > 1000


def test_a_sagemaker_job_exports_its_counters_and_steps(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    source = shared_fixtures / "smdebug" / "test_traces"
    summary = export_trace(source, tmp_path / "t.json", format="chrome")
    events = load_chrome(tmp_path / "t.json")
    counts = check_chrome(events)
    assert counts["counters"] > 0 and summary.counters > 0
    assert counts["slices"] == summary.slices


def test_an_export_left_in_a_folder_of_traces_is_not_read_as_one_of_them(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    # An export written into the folder it exports was taken for one more rank's trace (on
    # its own clock): the next export of that folder held every slice twice.
    folder = tmp_path / "traces"
    folder.mkdir()
    for trace in (shared_fixtures / "kineto" / "two_ranks_one_job").glob("*.json.gz"):
        (folder / trace.name).write_bytes(trace.read_bytes())
    first = export_trace(folder, folder / "merged.json", format="chrome")
    again = export_trace(folder, tmp_path / "again.json", format="chrome")
    assert again.slices == first.slices == _spans(shared_fixtures / "kineto" / "two_ranks_one_job")

"""Saving a PyTorch profiler trace with its event names escaped leaves valid JSON as it was."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from stepscope.store.kineto_names import iter_escaped_blocks


@pytest.mark.parametrize(
    "name", ["v100_single_ns_resolution.pt.trace.json.gz", "legacy_2021_gpu_metrics_input.json"]
)
def test_a_trace_written_as_valid_json_is_kept_byte_for_byte(shared_fixtures, name):
    path = shared_fixtures / "kineto" / name
    original = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    assert b"".join(iter_escaped_blocks(io.BytesIO(original))) == original


def test_names_with_quotes_become_json_strings_that_hold_them(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    names = ['say "hi"', '"quoted"', 'a "b", c', "plain"]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for name in names:
            with torch.profiler.record_function(name):
                torch.ones(4).sum()
    path = tmp_path / "trace.json"
    profiler.export_chrome_trace(str(path))
    with open(path, "rb") as source:
        trace = json.loads(b"".join(iter_escaped_blocks(source)))
    annotations = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    assert annotations == names

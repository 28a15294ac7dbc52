"""Launch delays: each GPU operation joined to the call that launched it."""

from __future__ import annotations

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import launch_delays


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_every_launched_operation_with_both_delays(job):
    table = launch_delays(job).set_index("correlation")
    # Six GPU operations, each with its runtime or driver call.
    assert sorted(table.index) == [1001, 1002, 1003, 1004, 1005, 1006]
    sgemm = table.loc[1001]
    assert (sgemm["launch_to_start_us"], sgemm["call_end_to_start_us"]) == (5, 0)
    triton = table.loc[1006]
    assert triton["launch_name"] == "cuLaunchKernel"
    # Launched 131-134, started at 170.
    assert (triton["launch_to_start_us"], triton["call_end_to_start_us"]) == (39, 36)
    assert table.loc[1004, "gpu_dur_us"] == 30

"""A tiny hand-written Kineto trace whose analysis results can be computed by hand.

Rank 0, two profiled steps, one GPU (device 0, streams 7 and 8). Times in µs from 0; the trace
has no ``baseTimeNanoseconds``, so ``start_us`` equals ``ts``.

Step 1 (host 0-100)::

    CPU  0-10 DataLoader __next__ | 10-40 aten::mm (launch 15-20) | 40-60 nccl:all_reduce
         (launch 45-50) | 60-65 cudaMemcpyAsync
    GPU  20-50 volta_sgemm (stream 7) | 40-80 ncclKernel AllReduce (stream 8) | 70-75 memcpy HtoD

Step 2 (host 100-200; its last kernel ends at 220, so its window is 100-220)::

    CPU  105-120 aten::fill_ (launch 110-115) | 121-125 cudaMemsetAsync | 130-135 triton op
         (cuLaunchKernel 131-134, Input type BFloat16)
    GPU  150-160 memset | 170-180 triton kernel | 190-220 FillFunctor<c10::Half>

Two allocator events (device 0): +100 B at 5 (allocated 100, reserved 2000), -50 B at 30.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

CPU_PID, CPU_TID = 100, 1


def _cpu(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": CPU_PID, "tid": CPU_TID, "ts": ts,
            "dur": dur, "args": args}  # fmt: skip


def _gpu(cat: str, name: str, ts: float, dur: float, stream: int, corr: int, **args: Any):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **args}}  # fmt: skip


def _flow(ph: str, pid: int, tid: int, ts: float, **extra: Any) -> dict[str, Any]:
    """One end of the launch-to-kernel flow of correlation 1001."""
    return {"ph": ph, "id": 1001, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g",
            **extra}  # fmt: skip


def _memory(ts: float, change_bytes: int, *, allocated: int) -> dict[str, Any]:
    """An allocator event on device 0 (address 1), 2000 B reserved."""
    args = {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": change_bytes,
            "Total Allocated": allocated, "Total Reserved": 2000}  # fmt: skip
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": CPU_PID,
            "tid": CPU_TID, "ts": ts, "args": args}  # fmt: skip


def events() -> list[dict[str, Any]]:
    """The trace's events (CPU, GPU, memory, flows, metadata)."""
    return [
        {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "py"}},
        _cpu("user_annotation", "ProfilerStep#1", 0, 100),
        _cpu("user_annotation", "ProfilerStep#2", 100, 100),
        _cpu(
            "user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10
        ),
        _cpu("cpu_op", "aten::mm", 10, 30, **{"External id": 1, "Input type": ["float", "float"]}),
        _cpu("cuda_runtime", "cudaLaunchKernel", 15, 5, correlation=1001, **{"External id": 1}),
        _cpu("user_annotation", "nccl:all_reduce", 40, 20, **{"External id": 4}),
        _cpu("cuda_runtime", "cudaLaunchKernel", 45, 5, correlation=1002, **{"External id": 4}),
        _cpu("cuda_runtime", "cudaMemcpyAsync", 60, 5, correlation=1003),
        _cpu("cpu_op", "aten::fill_", 105, 15, **{"External id": 2}),
        _cpu("cuda_runtime", "cudaLaunchKernel", 110, 5, correlation=1004, **{"External id": 2}),
        _cpu("cuda_runtime", "cudaMemsetAsync", 121, 4, correlation=1005),
        _cpu(
            "cpu_op",
            "triton_poi_fused_add_0",
            130,
            5,
            **{"External id": 3, "Input type": ["c10::BFloat16", "c10::BFloat16"]},
        ),  # fmt: skip
        _cpu("cuda_driver", "cuLaunchKernel", 131, 3, correlation=1006, **{"External id": 3}),
        _cpu(
            "python_function",
            "train.py(12): step",
            12,
            2,
            **{"Python id": 7, "Python parent id": 3},
        ),  # fmt: skip
        _gpu("kernel", "volta_sgemm_128x64_nn", 20, 30, 7, 1001, **{"External id": 1}),
        _gpu("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 40, 40, 8, 1002),
        _gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 70, 5, 7, 1003, bytes=1000),
        _gpu("gpu_memset", "Memset (Device)", 150, 10, 7, 1005, bytes=64),
        _gpu("kernel", "triton_poi_fused_add_0", 170, 10, 7, 1006, **{"External id": 3}),
        _gpu(
            "kernel",
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::FillFunctor<c10::Half> >(int)",
            190,
            30,
            7,
            1004,
            **{"External id": 2},
        ),  # fmt: skip
        _flow("s", CPU_PID, CPU_TID, 15),
        _flow("f", 0, 7, 20, bp="e"),
        _memory(5, 100, allocated=100),
        _memory(30, -50, allocated=50),
    ]


def write_trace(
    folder: Path, name: str = "synthetic_rank-0.pt.trace.json.gz", *, shift_us: float = 0
) -> Path:
    """Write the trace as a gzipped Kineto document, every event ``shift_us`` later; its path."""
    trace_events = [{**e, "ts": e["ts"] + shift_us} if "ts" in e else e for e in events()]
    document = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Synthetic GPU", "numSms": 80}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": trace_events,
        "traceName": "synthetic",
    }
    path = folder / name
    with gzip.open(path, "wt") as handle:
        json.dump(document, handle)
    return path


def open_synthetic_job(folder: Path) -> Any:
    """Write the trace into ``folder`` and open it as a job cached in ``folder / "cache"``."""
    from stepscope.store import open_job

    job = open_job(write_trace(folder), cache_dir=folder / "cache")
    job.refresh()
    return job

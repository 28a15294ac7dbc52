"""The two columnar tables every reader produces and every analysis consumes.

Whatever the source (a stepscope job, a SageMaker Debugger output folder, a PyTorch profiler
trace, a TensorFlow profiler trace, a Horovod timeline), readers emit Arrow record batches with
exactly these columns, so analyses, rules and the UI are written once.

Times are absolute, in microseconds since the Unix epoch, on the clock of the process that
recorded them (per-rank clock offsets are stored beside the data, never applied to it). Missing
integers are ``-1`` and missing strings ``""``, so every column stays non-nullable and cheap to scan.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["EVENT_SCHEMA", "INT64_MAX", "INT64_MIN", "SYSTEM_SCHEMA", "TIME_LIMIT_US"]

#: The range of the int64 columns: a value read from a file outside it is not one they can hold.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: An event's start and end (µs) lie strictly within this of zero: the analyses turn them into
#: 64-bit timestamps, which a time beyond it (or one that is not a number) would break.
TIME_LIMIT_US = 2.0**63

#: One system-metric sample (SageMaker's system record, ``Timestamp`` converted to µs).
SYSTEM_SCHEMA = pa.schema(
    [
        pa.field("timestamp_us", pa.int64(), nullable=False),
        pa.field("node", pa.string(), nullable=False),  # "algo-1"
        pa.field("type", pa.string(), nullable=False),  # cpu | gpu | memory | i/o | network
        pa.field("name", pa.string(), nullable=False),  # cpu0, gpu3, MemoryUsedPercent, IOPS ...
        pa.field("dimension", pa.string(), nullable=False),  # CPUUtilization, GPUUtilization ...
        pa.field("value", pa.float64(), nullable=False),
    ]
)

#: One timeline event: a framework event, a Kineto op/kernel/memcpy, a TF op, a Horovod span.
EVENT_SCHEMA = pa.schema(
    [
        # pythontimeline | model_timeline | horovod | smdataparallel | kineto | tfprofiler | collective
        pa.field("source", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),  # host-level node: "algo-1"
        pa.field("rank", pa.int32(), nullable=False),  # -1 when unknown
        # SageMaker phase (process name: "Step:ModeKeys.TRAIN", "Forward", "DataLoaderWorker")
        # or the modern Kineto category ("cpu_op", "kernel", "gpu_memcpy", "cuda_runtime" ...).
        pa.field("category", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("ph", pa.string(), nullable=False),  # X (span) | i (instant) | C (counter)
        pa.field("start_us", pa.float64(), nullable=False),
        pa.field("dur_us", pa.float64(), nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("tid", pa.int64(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("device", pa.int64(), nullable=False),
        pa.field("stream", pa.int64(), nullable=False),
        pa.field("correlation", pa.int64(), nullable=False),
        pa.field("external_id", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("args", pa.string(), nullable=False),  # the remaining args, as compact JSON
    ]
)

"""CPU and GPU utilization aggregates over the ``system`` view, sized for a dashboard.

Two questions the Profiler UI's dashboard asks of system metrics, answered in SQL so a job of any
length comes back as a few rows:

* *active time*: per node, how many utilization samples were above 0 % (active) and how many
  were exactly 0 % (idle) — SageMaker Profiler's definition of the CPU and GPU active-time pies;
* *utilization over time*: per node, the mean utilization across that node's cores or GPUs,
  averaged into at most ``max_points`` time bins, so a 60-hour job and a 60-second job both give
  a chart of bounded size.

Both take a path, a :class:`~stepscope.store.JobData`, a :class:`~stepscope.analysis.PandasFrame`
or an open DuckDB connection that has a ``system`` view in :data:`~stepscope.store.SYSTEM_SCHEMA`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from stepscope.analysis._events import events_connection
from stepscope.config.validation import check_int, plain_number
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DeviceKind", "system_active_time", "system_utilization_timeline"]

#: Which utilization a function reads: per-core CPU or per-GPU utilization.
DeviceKind = Literal["cpu", "gpu"]

# kind -> (system.type, system.dimension) holding that utilization, in percent per device.
_UTILIZATION_METRIC: dict[str, tuple[str, str]] = {
    "cpu": ("cpu", "CPUUtilization"),
    "gpu": ("gpu", "GPUUtilization"),
}


def _metric(kind: str) -> tuple[str, str]:
    if kind not in _UTILIZATION_METRIC:
        raise ConfigError("utilization kind", kind, "one of " + ", ".join(_UTILIZATION_METRIC))
    return _UTILIZATION_METRIC[kind]


def system_active_time(job_or_con: Any, *, kind: DeviceKind = "gpu") -> pd.DataFrame:
    """Active versus idle utilization samples per node.

    A sample is active when the device's utilization is above 0 % and idle when it is 0 %, as
    SageMaker Profiler counts them. ``active_device_s`` and ``idle_device_s`` turn the counts into
    device-seconds (the node's sampled span times its number of devices, split by the sample
    ratio), which is what a pie's hover text shows.

    :param job_or_con: a path, a JobData, a PandasFrame or a DuckDB connection with a
        ``system`` view.
    :param kind: ``"gpu"`` (GPUUtilization of each GPU) or ``"cpu"`` (CPUUtilization per core).
    :returns: one row per node, sorted by node: ``node, devices, samples, active_samples,
        idle_samples, active_pct, span_s, active_device_s, idle_device_s``. Empty when the job
        has no such metric.
    """
    metric_type, dimension = _metric(kind)
    con = events_connection(job_or_con)
    # duckdb types .df() as Any; it is a pandas DataFrame.
    frame: pd.DataFrame = con.execute(
        """
        WITH per_node AS (
            SELECT node,
                   count(DISTINCT name) AS devices,
                   count(*) AS samples,
                   count(*) FILTER (WHERE value > 0) AS active_samples,
                   (max(timestamp_us) - min(timestamp_us)) / 1e6 AS span_s
            FROM system
            WHERE type = ? AND dimension = ?
            GROUP BY node
        )
        SELECT node, devices, samples, active_samples,
               samples - active_samples AS idle_samples,
               100.0 * active_samples / samples AS active_pct,
               span_s,
               span_s * devices * active_samples / samples AS active_device_s,
               span_s * devices * (samples - active_samples) / samples AS idle_device_s
        FROM per_node
        ORDER BY node
        """,
        [metric_type, dimension],
    ).df()
    return frame


def system_utilization_timeline(
    job_or_con: Any, *, kind: DeviceKind = "gpu", max_points: int = 500
) -> pd.DataFrame:
    """Mean utilization per node over time, in at most ``max_points`` bins per node.

    Each bin averages every sample of every device of the node inside it, so the line of a node
    is its mean CPU (or GPU) utilization, and nodes with unbalanced load show as separate lines.

    :param job_or_con: a path, a JobData, a PandasFrame or a DuckDB connection with a
        ``system`` view.
    :param kind: ``"gpu"`` or ``"cpu"``, as in :func:`system_active_time`.
    :param max_points: upper bound on the number of bins per node (>= 1); the bin width is the
        job's sampled span divided by it, never less than 1 µs.
    :returns: ``node, timestamp_us`` (bin start), ``time_s`` (seconds since the job's first
        sample of this ``kind``: GPU and CPU origins may differ, so charts that share an axis
        use ``timestamp_us``), ``utilization_pct``, ``samples``; sorted by node and time.
    """
    max_points = check_int(
        "system_utilization_timeline.max_points", plain_number(max_points), minimum=1
    )
    metric_type, dimension = _metric(kind)
    con = events_connection(job_or_con)
    # duckdb types .df() as Any; it is a pandas DataFrame.
    frame: pd.DataFrame = con.execute(
        """
        WITH samples AS (
            SELECT node, timestamp_us, value FROM system WHERE type = ? AND dimension = ?
        ),
        bounds AS (
            SELECT min(timestamp_us) AS t0,
                   greatest(1, ceil((max(timestamp_us) - min(timestamp_us) + 1) / ?))::BIGINT
                       AS width_us
            FROM samples
        )
        SELECT node,
               t0 + bin * width_us AS timestamp_us,
               bin * width_us / 1e6 AS time_s,
               utilization_pct,
               samples
        FROM (
            SELECT s.node,
                   (s.timestamp_us - b.t0) // b.width_us AS bin,
                   avg(s.value) AS utilization_pct,
                   count(*) AS samples,
                   any_value(b.t0) AS t0,
                   any_value(b.width_us) AS width_us
            FROM samples s, bounds b
            GROUP BY s.node, bin
        )
        ORDER BY node, timestamp_us
        """,
        [metric_type, dimension, max_points],
    ).df()
    return frame

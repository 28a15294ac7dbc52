"""One system-metrics snapshot: CPU, memory, disk, network and GPU records in SageMaker's names.

Rates and percentages are deltas of the kernel's raw counters (``psutil``) between two calls of
:meth:`SystemSampler.sample`, so the first call only primes the counters. Each group of records
carries the timestamp at which its counters were read, as SageMaker's agent does (records of one
snapshot are microseconds apart). Percentages are rounded to 2 decimals, rates to 2 decimals.

=========  ==============================================================  ==============
Type       Name                                                            Dimension
=========  ==============================================================  ==============
cpu        ``cpu0`` .. ``cpuN``                                            CPUUtilization, I/OWaitPercentage
gpu        ``gpu0`` .. ``gpuN``                                            GPUUtilization, GPUMemoryUtilization
memory     MemoryUsedPercent                                               ``""``
i/o        IOPS, ReadThroughputInBytesPerSecond, WriteThroughputInBytesPerSecond  ``""``
network    ReceiveBytesPerSecond, TransmitBytesPerSecond                   Algorithm
=========  ==============================================================  ==============

``CPUUtilization`` counts iowait as idle (like ``top`` and ``psutil.cpu_percent``), and guest time
once (Linux already includes it in user time). A core is named by the id the kernel gives it: with
cores offline (``/sys/devices/system/cpu/online`` = ``0-3,6-7``) the last two are ``cpu6`` and
``cpu7``, not the fifth and sixth in the list, and a core going offline or coming back leaves the
others' series as they are.

Disk and network rates sum the devices with hardware behind them (``/sys/block/<disk>/device``,
``/sys/class/net/<interface>/device`` on Linux), where ``psutil``'s totals add every layer: the
I/O of a stacked disk (LVM, RAID, dm-crypt, a loop file) counts once, at the disks it reaches, and
a RAM disk's (zram swap) not at all; traffic counts once, where it enters or leaves the node, not
again on each bridge, veth, bond or VLAN it crosses, and traffic between containers or processes
of the node not at all. Where no device shows hardware (inside a container, not Linux), every disk
counts, and every interface but loopback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import psutil

from stepscope.collect.clock import now_s
from stepscope.collect.monitor.gpu import GpuBackend
from stepscope.store import SystemRecord

__all__ = ["SystemSampler"]

_PROC_STAT = Path("/proc/stat")
_SYS_BLOCK = Path("/sys/block")
_SYS_NET = Path("/sys/class/net")
_IDLE_FIELDS = ("idle", "iowait")
_DOUBLE_COUNTED_FIELDS = ("guest", "guest_nice")  # already part of user / nice on Linux
#: /proc/stat's fields of a core, in its order
_PROC_STAT_FIELDS = (
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice",
)  # fmt: skip


class _CoreTimes(NamedTuple):
    """The time a core has spent, in any unit: in all (guest time once), idle, in I/O wait."""

    total: float
    idle: float
    iowait: float


class SystemSampler:
    """Reads the node's counters and turns the change since the last call into records.

    :param gpu_backend: an opened GPU backend (its :meth:`~GpuBackend.sample` is called each time).
    :param clock_s: the clock of the record timestamps, seconds since the epoch (default the
        collection clock, which a step of the wall clock does not move).
    :param proc_stat: the kernel's CPU counters on Linux, which name each core by its id (another
        file replays scripted counters); where it cannot be read, psutil's list of cores.
    """

    def __init__(
        self,
        gpu_backend: GpuBackend,
        *,
        clock_s: Callable[[], float] = now_s,
        proc_stat: Path = _PROC_STAT,
    ) -> None:
        self._gpu = gpu_backend
        self._clock_s = clock_s
        self._proc_stat = proc_stat
        self._cpu: dict[str, _CoreTimes] | None = None
        self._disk: tuple[float, _DiskCounters] | None = None
        self._hardware: dict[Path, bool] = {}
        self._net: tuple[float, int, int] | None = None

    def sample(self) -> list[SystemRecord]:
        """One snapshot (empty rate groups on the first call, which primes the counters)."""
        records: list[SystemRecord] = []
        self._sample_cpu(records)
        now_s = self._clock_s()
        for gpu in self._gpu.sample():
            for dimension, value in (
                ("GPUUtilization", gpu.utilization_pct),
                ("GPUMemoryUtilization", gpu.memory_pct),
            ):
                if value is not None:  # a metric this GPU could not report
                    records.append(
                        SystemRecord("gpu", f"gpu{gpu.index}", dimension, round(value, 2), now_s)
                    )
        memory_pct = psutil.virtual_memory().percent
        records.append(
            SystemRecord("memory", "MemoryUsedPercent", "", round(memory_pct, 2), self._clock_s())
        )
        self._sample_disk(records)
        self._sample_network(records)
        return records

    def _sample_cpu(self, records: list[SystemRecord]) -> None:
        times = self._core_times()
        now_s = self._clock_s()
        previous, self._cpu = self._cpu, times
        if previous is None:
            return
        for name, after in times.items():
            before = previous.get(name)
            if before is None:
                continue  # came online since the last sample: primed now
            total = after.total - before.total
            if total <= 0:
                continue  # no tick on this core since the last sample (very short interval)
            busy_pct = _clamp_pct(100.0 * (total - (after.idle - before.idle)) / total)
            records.append(SystemRecord("cpu", name, "CPUUtilization", busy_pct, now_s))
            iowait_pct = _clamp_pct(100.0 * (after.iowait - before.iowait) / total)
            records.append(SystemRecord("cpu", name, "I/OWaitPercentage", iowait_pct, now_s))

    def _core_times(self) -> dict[str, _CoreTimes]:
        """Each online core's times by its SageMaker name, ``cpu<id>``: Linux's ``/proc/stat``
        names the cores by id, where psutil's list (all there is elsewhere) numbers them."""
        try:
            text = self._proc_stat.read_text()
        except OSError:  # not Linux
            return {
                f"cpu{index}": _core_times(times._asdict())
                for index, times in enumerate(psutil.cpu_times(percpu=True))
            }
        cores = {}
        for line in text.splitlines():
            name, _, ticks = line.partition(" ")
            if name.startswith("cpu") and name[3:].isdigit():
                # an older kernel reports fewer fields, a newer one may add some
                fields = zip(_PROC_STAT_FIELDS, map(float, ticks.split()), strict=False)
                cores[name] = _core_times(dict(fields))
        return cores

    def _sample_disk(self, records: list[SystemRecord]) -> None:
        counters = self._disk_counters()
        now_s = self._clock_s()
        if counters is None:
            return
        previous, self._disk = self._disk, (time.monotonic(), counters)
        if previous is None:
            return
        elapsed_s = self._disk[0] - previous[0]
        if elapsed_s <= 0:
            return
        before = previous[1]
        operations = (counters.read_count - before.read_count) + (
            counters.write_count - before.write_count
        )
        for name, delta in (
            ("IOPS", operations),
            ("ReadThroughputInBytesPerSecond", counters.read_bytes - before.read_bytes),
            ("WriteThroughputInBytesPerSecond", counters.write_bytes - before.write_bytes),
        ):
            records.append(
                SystemRecord("i/o", name, "", round(max(delta, 0) / elapsed_s, 2), now_s)
            )

    def _disk_counters(self) -> _DiskCounters | None:
        """The I/O counters summed over the node's disks (see the module docstring); psutil's
        own total where no disk shows its device (not Linux); ``None`` without any disk."""
        per_disk = psutil.disk_io_counters(perdisk=True) or {}
        # a partition (sda1) has no folder of its own there: its disk counts its I/O
        disks = [c for name, c in per_disk.items() if self._has_hardware(_SYS_BLOCK, name)]
        if not disks and (total := psutil.disk_io_counters()) is not None:
            disks = [total]
        if not disks:  # no disk the kernel reports (some containers)
            return None
        return _DiskCounters(
            *(sum(getattr(disk, field) for disk in disks) for field in _DiskCounters._fields)
        )

    def _sample_network(self, records: list[SystemRecord]) -> None:
        per_nic = psutil.net_io_counters(pernic=True)
        nics = [c for name, c in per_nic.items() if self._has_hardware(_SYS_NET, name)]
        if not nics:
            nics = [counters for name, counters in per_nic.items() if name != "lo"]
        received = sum(counters.bytes_recv for counters in nics)
        sent = sum(counters.bytes_sent for counters in nics)
        now_s = self._clock_s()
        previous, self._net = self._net, (time.monotonic(), received, sent)
        if previous is None:
            return
        elapsed_s = self._net[0] - previous[0]
        if elapsed_s <= 0:
            return
        for name, delta in (
            ("ReceiveBytesPerSecond", received - previous[1]),
            ("TransmitBytesPerSecond", sent - previous[2]),
        ):
            records.append(
                SystemRecord(
                    "network", name, "Algorithm", round(max(delta, 0) / elapsed_s, 2), now_s
                )
            )

    def _has_hardware(self, folder: Path, name: str) -> bool:
        """Whether the disk or interface ``name`` listed in ``folder`` has a device behind it."""
        path = folder / name.replace("/", "!") / "device"
        known = self._hardware.get(path)
        if known is None:
            known = self._hardware[path] = path.exists()
        return known


class _DiskCounters(NamedTuple):
    read_count: int
    write_count: int
    read_bytes: int
    write_bytes: int


def _core_times(fields: dict[str, float]) -> _CoreTimes:
    """A core's times from its named fields (those a kernel does not report count 0)."""
    total = sum(fields.values()) - sum(fields.get(f, 0.0) for f in _DOUBLE_COUNTED_FIELDS)
    idle = sum(fields.get(f, 0.0) for f in _IDLE_FIELDS)
    return _CoreTimes(total, idle, fields.get("iowait", 0.0))


def _clamp_pct(value: float) -> float:
    return round(min(max(value, 0.0), 100.0), 2)

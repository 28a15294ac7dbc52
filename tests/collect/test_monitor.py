"""The system monitor: a real process sampling into SageMaker system files, and how it stops."""

from __future__ import annotations

import calendar
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from stepscope.collect import ScriptedGpuBackend, start_monitor
from stepscope.collect.monitor import GpuBackend, GpuInfo, GpuSample, SystemSampler
from stepscope.collect.monitor.loop import run_monitor
from stepscope.errors import ConfigError
from stepscope.store import write_job_end_marker


def system_records(output_dir: Path) -> list[dict[str, Any]]:
    """The complete records of the system files; the monitor may be writing the last line."""
    files = sorted((output_dir / "system" / "incremental").glob("*/*.algo-1.json"))
    return [json.loads(line) for path in files for line in path.read_text().split("\n")[:-1]]


def wait_for(condition: Any, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def _online_cores() -> list[int]:
    """The ids of the cores online, as the kernel lists them (``0-3,6-7``)."""
    online = Path("/sys/devices/system/cpu/online")
    if not online.exists():  # not Linux: the cores are numbered
        return list(range(psutil.cpu_count() or 0))
    cores = []
    for part in online.read_text().strip().split(","):
        first, _, last = part.partition("-")
        cores += range(int(first), int(last or first) + 1)
    return cores


def test_monitor_process_writes_every_metric_for_every_core(tmp_path: Path) -> None:
    handle = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    try:
        assert handle.is_alive()
        assert wait_for(
            lambda: (
                len({r["Timestamp"] for r in system_records(tmp_path) if r["Type"] == "cpu"}) >= 15
            )
        )
    finally:
        assert handle.stop() == 0
    assert not handle.is_alive()
    records = system_records(tmp_path)
    assert {r["NodeId"] for r in records} == {"algo-1"}
    by_series: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_series[(record["Name"], record["Dimension"])].append(record)
    expected = {
        (f"cpu{i}", d) for i in _online_cores() for d in ("CPUUtilization", "I/OWaitPercentage")
    }
    expected |= {("MemoryUsedPercent", "")}
    expected |= {
        (n, "")
        for n in ("IOPS", "ReadThroughputInBytesPerSecond", "WriteThroughputInBytesPerSecond")
    }
    expected |= {(n, "Algorithm") for n in ("ReceiveBytesPerSecond", "TransmitBytesPerSecond")}
    if psutil.disk_io_counters() is None:  # a container without block devices
        expected = {
            key for key in expected if key[0] not in {"IOPS"} and "Throughput" not in key[0]
        }
    assert set(by_series) == expected
    for (name, dimension), series in by_series.items():
        times = [r["Timestamp"] for r in series]
        assert times == sorted(times) and len(set(times)) == len(times), name
        if dimension in ("CPUUtilization", "I/OWaitPercentage") or name == "MemoryUsedPercent":
            assert all(0.0 <= r["Value"] <= 100.0 for r in series), name
        else:
            assert all(r["Value"] >= 0.0 for r in series), name
    assert len(by_series[("cpu0", "CPUUtilization")]) >= 15
    assert "monitor stopped: stopped" in (tmp_path / "monitor-algo-1.log").read_text()


def test_scripted_gpus_come_out_as_gpu_records(tmp_path: Path) -> None:
    script = tmp_path / "gpus.json"
    script.write_text(json.dumps({"samples": [[[10, 20], [30, 40]], [[50, 60], [70, 80]]]}))
    handle = start_monitor(tmp_path / "out", interval_ms=100, gpu_backend=f"scripted:{script}")
    try:
        assert wait_for(
            lambda: sum(r["Type"] == "gpu" for r in system_records(tmp_path / "out")) >= 16
        )
    finally:
        handle.stop()
    gpu = [r for r in system_records(tmp_path / "out") if r["Type"] == "gpu"]
    snapshots: dict[float, list[tuple[str, str, float]]] = defaultdict(list)
    for record in gpu:
        snapshots[record["Timestamp"]].append(
            (record["Name"], record["Dimension"], record["Value"])
        )
    readings = list(snapshots.values())
    first = [("gpu0", "GPUUtilization", 10.0), ("gpu0", "GPUMemoryUtilization", 20.0)]
    first += [("gpu1", "GPUUtilization", 30.0), ("gpu1", "GPUMemoryUtilization", 40.0)]
    second = [("gpu0", "GPUUtilization", 50.0), ("gpu0", "GPUMemoryUtilization", 60.0)]
    second += [("gpu1", "GPUUtilization", 70.0), ("gpu1", "GPUMemoryUtilization", 80.0)]
    # the first script entry is used by the priming sample, which writes nothing
    assert readings[:4] == [second, first, second, first]


def test_monitor_exits_on_the_job_end_marker(tmp_path: Path) -> None:
    handle = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    try:
        assert wait_for(lambda: len(system_records(tmp_path)) > 0)
        write_job_end_marker(tmp_path)
        assert handle.wait(30) == 0
    finally:
        handle.stop()
    assert "monitor stopped: job ended" in (tmp_path / "monitor-algo-1.log").read_text()


def test_a_second_monitor_of_the_same_node_exits_and_the_first_samples_alone(
    tmp_path: Path,
) -> None:
    # ranks started by torch.multiprocessing.spawn each take themselves for the node's first
    first = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    second = None
    try:
        assert wait_for(lambda: len(system_records(tmp_path)) > 0)
        second = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
        assert second.wait(30) == 0
        assert first.is_alive()
        assert wait_for(lambda: len({r["Timestamp"] for r in system_records(tmp_path)}) >= 10)
    finally:
        if second is not None:
            second.stop()
        first.stop()
    assert "another monitor samples node algo-1" in (tmp_path / "monitor-algo-1.log").read_text()
    samples = [(r["Timestamp"], r["Name"], r["Dimension"]) for r in system_records(tmp_path)]
    assert len(samples) == len(set(samples)), "every sample written once"


def test_the_monitors_of_two_nodes_write_files_of_different_names(tmp_path: Path) -> None:
    # a multi-node job is read as one by copying every node's profiler output into one folder
    # (docs/instrumentation.md): both monitors wrote monitor.log, and the copy kept one of them
    for node in ("algo-1", "algo-2"):
        handle = start_monitor(tmp_path / node, node=node, interval_ms=100, gpu_backend="none")
        assert wait_for(lambda: any((tmp_path / node / "system").rglob("*.json")))  # noqa: B023
        assert handle.stop() == 0
    names = {
        node: {path.relative_to(tmp_path / node) for path in (tmp_path / node).rglob("*")}
        for node in ("algo-1", "algo-2")
    }
    files = {
        node: {p for p in paths if (tmp_path / node / p).is_file()} for node, paths in names.items()
    }
    assert not files["algo-1"] & files["algo-2"]
    assert "monitor of algo-2 started" in (tmp_path / "algo-2" / "monitor-algo-2.log").read_text()


def test_the_node_is_free_again_once_its_monitor_was_killed(tmp_path: Path) -> None:
    first = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    assert wait_for(lambda: len(system_records(tmp_path)) > 0)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    second = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    try:
        before = len(system_records(tmp_path))
        assert wait_for(lambda: len(system_records(tmp_path)) > before)
        assert second.is_alive()
    finally:
        assert second.stop() == 0


_PARENT = textwrap.dedent(
    """
    import sys, time
    from stepscope.collect import start_monitor
    handle = start_monitor(sys.argv[1], interval_ms=100, gpu_backend="none")
    print(handle.pid, flush=True)
    time.sleep(600)
    """
)


def test_monitor_exits_when_its_parent_dies(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        monitor_pid = int(parent.stdout.readline())
        assert wait_for(lambda: len(system_records(tmp_path)) > 0)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()

    def monitor_gone() -> bool:
        try:
            return psutil.Process(monitor_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    try:
        assert wait_for(monitor_gone)
    finally:
        if not monitor_gone():
            psutil.Process(monitor_pid).kill()
    assert "monitor stopped: parent exited" in (tmp_path / "monitor-algo-1.log").read_text()


def test_bad_arguments_are_rejected_before_starting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="start_monitor.node"):
        start_monitor(tmp_path, node="gpu-box")
    with pytest.raises(ConfigError, match="start_monitor.interval_ms"):
        start_monitor(tmp_path, interval_ms=0)
    with pytest.raises(ConfigError, match="gpu_backend"):
        start_monitor(tmp_path, gpu_backend="rocm")
    assert not (tmp_path / "system").exists()


class _FailingOnceBackend(GpuBackend):
    """Raises a non-NVML error at its second sample, then stops the loop after a few more."""

    def __init__(self, stop: threading.Event) -> None:
        self.calls = 0
        self.stop = stop

    def open(self) -> list[GpuInfo]:
        return [GpuInfo(0, "g", 1)]

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("driver hiccup")
        if self.calls == 6:
            self.stop.set()
        return [GpuSample(0, float(self.calls), 1.0)]

    def spec(self) -> str:
        return "test"


def test_a_failing_snapshot_is_logged_and_the_loop_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stop = threading.Event()
    backend = _FailingOnceBackend(stop)
    with caplog.at_level(logging.ERROR, logger="stepscope.collect.monitor.loop"):
        reason = run_monitor(tmp_path, interval_ms=20, gpu_backend=backend, stop=stop)
    assert reason == "stopped"
    failures = [r for r in caplog.records if "snapshot failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    values = [r["Value"] for r in system_records(tmp_path) if r["Dimension"] == "GPUUtilization"]
    assert values[:3] == [3.0, 4.0, 5.0]


class _StopAfterFirstSnapshot(GpuBackend):
    """Stops the loop at its first snapshot (its second sample: the first primes the counters)."""

    def __init__(self, stop: threading.Event) -> None:
        self.calls = 0
        self.stop = stop

    def open(self) -> list[GpuInfo]:
        return []

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        if self.calls == 2:
            self.stop.set()
        return []

    def spec(self) -> str:
        return "test"


def test_the_first_snapshot_covers_enough_time_for_the_cpu_counters(tmp_path: Path) -> None:
    # a tick a few ms after the monitor primed its counters made a first snapshot whose cores'
    # counters (10 ms ticks) had not moved: a short job then had no CPU metrics at all
    interval_s = 0.1
    start_s = time.time()
    # the clock the monitor ticks by is set so that its first tick falls 30 ms after it starts
    offset_s = (start_s // interval_s + 1) * interval_s - 0.03 - start_s + interval_s
    stop = threading.Event()
    run_monitor(
        tmp_path,
        interval_ms=100,
        gpu_backend=_StopAfterFirstSnapshot(stop),
        stop=stop,
        clock_s=lambda: time.time() + offset_s,
    )
    records = system_records(tmp_path)
    first_s = min(r["Timestamp"] for r in records)
    assert first_s - (start_s + offset_s) >= 0.05
    cores = {r["Name"] for r in records if r["Dimension"] == "CPUUtilization"}
    assert cores == {f"cpu{core}" for core in _online_cores()}


def test_sampler_stamps_records_with_its_clock_and_sees_a_busy_core() -> None:
    now = [1_800_000_000.0]
    sampler = SystemSampler(ScriptedGpuBackend([]), clock_s=lambda: now[0])
    primed = sampler.sample()
    assert [(r.type, r.name) for r in primed] == [("memory", "MemoryUsedPercent")]
    deadline = time.process_time() + 0.5
    while time.process_time() < deadline:  # half a second of CPU on one core
        pass
    now[0] += 0.5
    records = sampler.sample()
    assert {r.timestamp_s for r in records} == {1_800_000_000.5}
    busy = [r.value for r in records if r.dimension == "CPUUtilization"]
    # our half second of CPU ran on some core(s) in that interval, whatever else ran
    assert len(busy) == psutil.cpu_count() and sum(busy) >= 50.0


def _proc_stat(ticks: dict[int, tuple[int, ...]]) -> str:
    """A /proc/stat of the cores ``ticks`` lists (user nice system idle iowait irq softirq
    steal guest guest_nice, in clock ticks), the others offline as the kernel leaves them out."""
    lines = ["cpu  " + " ".join(map(str, map(sum, zip(*ticks.values(), strict=True))))]
    lines += [f"cpu{core} " + " ".join(map(str, times)) for core, times in ticks.items()]
    return "\n".join([*lines, "intr 1 0", "ctxt 5", "btime 1700000000", ""])


def test_cores_are_named_by_their_ids_when_some_are_offline(tmp_path: Path) -> None:
    # /sys/devices/system/cpu/online = 0-3,6-7: cores 6 and 7 were reported as cpu4 and cpu5,
    # and each series mixed two cores when one went offline and another came back
    online = [0, 1, 2, 3, 6, 7]
    stat = tmp_path / "stat"
    stat.write_text(_proc_stat({core: (100, 0, 0, 100, 0, 0, 0, 0, 0, 0) for core in online}))
    sampler = SystemSampler(ScriptedGpuBackend([]), proc_stat=stat)
    sampler.sample()
    # 100 more ticks on each core: core 6 spent 50 of them busy (10 of them guest time, already
    # in user time) and 25 in I/O wait, the others all idle
    after = {core: (100, 0, 0, 200, 0, 0, 0, 0, 0, 0) for core in online}
    after[6] = (140, 0, 10, 125, 25, 0, 0, 0, 10, 0)
    stat.write_text(_proc_stat(after))
    records = [r for r in sampler.sample() if r.type == "cpu"]
    assert {r.name for r in records} == {f"cpu{core}" for core in online}
    values = {(r.name, r.dimension): r.value for r in records}
    assert values[("cpu6", "CPUUtilization")] == 50.0
    assert values[("cpu6", "I/OWaitPercentage")] == 25.0
    assert values[("cpu7", "CPUUtilization")] == 0.0
    # core 3 goes offline and core 5 comes online: the others go on under their own names
    later = {core: (*times[:3], times[3] + 100, *times[4:]) for core, times in after.items()}
    del later[3]
    later[5] = (10, 0, 0, 10, 0, 0, 0, 0, 0, 0)
    later[7] = (200, 0, 0, 240, 0, 0, 0, 0, 0, 0)
    stat.write_text(_proc_stat(dict(sorted(later.items()))))
    values = {(r.name, r.dimension): r.value for r in sampler.sample() if r.type == "cpu"}
    assert {name for name, _ in values} == {"cpu0", "cpu1", "cpu2", "cpu6", "cpu7"}
    assert values[("cpu7", "CPUUtilization")] == 71.43  # 100 busy of 140 ticks


def _bytes_read() -> dict[str, int]:
    """Bytes each block device read, from /proc/diskstats (sectors of 512 bytes)."""
    read = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        read[fields[2]] = int(fields[5]) * 512
    return read


@contextlib.contextmanager
def _loop_device(image: Path) -> Iterator[str]:
    """``image`` attached as a loop device whose reads go to the disk (direct I/O)."""
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("attaching a loop device needs root and losetup")
    attached = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=on", str(image)],
        capture_output=True,
        text=True,
    )
    if attached.returncode != 0:
        pytest.skip(f"no loop device here: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)


def test_disk_reads_through_a_loop_device_are_counted_once(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    size = 64 * 2**20
    with open(image, "wb") as handle:
        handle.write(os.urandom(size))
        os.fsync(handle.fileno())
    with _loop_device(image) as device:
        disks = [name for name in _bytes_read() if Path("/sys/block", name, "device").exists()]
        sampler = SystemSampler(ScriptedGpuBackend([]))
        started_s, before = time.monotonic(), _bytes_read()
        sampler.sample()
        subprocess.run(
            ["dd", f"if={device}", "of=/dev/null", "bs=1M", "iflag=direct", "status=none"],
            check=True,
        )
        [rate] = [r.value for r in sampler.sample() if r.name == "ReadThroughputInBytesPerSecond"]
        elapsed_s, after = time.monotonic() - started_s, _bytes_read()
    loop = Path(device).name
    assert after[loop] - before[loop] >= size * 0.9  # the 64 MiB went through the loop device
    # ... and reached the disk beneath it (or none, for an image in RAM): counted there only
    read_from_disks = sum(after[name] - before[name] for name in disks)
    assert rate * elapsed_s <= read_from_disks * 1.3 + 2**20


def _bytes_sent() -> dict[str, int]:
    """Bytes each network interface sent, from /proc/net/dev."""
    sent = {}
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        sent[name.strip()] = int(fields.split()[8])
    return sent


@contextlib.contextmanager
def _container_network() -> Iterator[tuple[str, str]]:
    """A veth pair whose far end is in a network namespace of its own, as a container's is;
    yields the near end's name and the far end's address."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("making a network namespace needs root and iproute2")
    namespace, near, far = f"stepscope{os.getpid()}", f"ssa{os.getpid()}", f"ssb{os.getpid()}"
    try:
        for command in (
            ["netns", "add", namespace],
            ["link", "add", near, "type", "veth", "peer", "name", far],
            ["link", "set", far, "netns", namespace],
            ["addr", "add", "10.213.77.1/30", "dev", near],
            ["link", "set", near, "up"],
            ["-n", namespace, "addr", "add", "10.213.77.2/30", "dev", far],
            ["-n", namespace, "link", "set", far, "up"],
        ):
            done = subprocess.run(["ip", *command], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a network namespace here: {done.stderr.strip()}")
        yield near, "10.213.77.2"
    finally:
        subprocess.run(["ip", "link", "del", near], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def test_traffic_to_a_container_of_the_node_is_not_network_traffic(tmp_path: Path) -> None:
    import socket

    with _container_network() as (near, address):
        physical = [
            name for name in _bytes_sent() if Path("/sys/class/net", name, "device").exists()
        ]
        sampler = SystemSampler(ScriptedGpuBackend([]))
        started_s, before = time.monotonic(), _bytes_sent()
        sampler.sample()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            for _ in range(8 * 1024):
                udp.sendto(bytes(1024), (address, 9))
        [rate] = [r.value for r in sampler.sample() if r.name == "TransmitBytesPerSecond"]
        elapsed_s, after = time.monotonic() - started_s, _bytes_sent()
    assert after[near] - before[near] >= 8 * 2**20  # the 8 MiB went to the container
    sent_out = sum(after[name] - before[name] for name in physical)
    assert rate * elapsed_s <= sent_out * 1.3 + 2**20


def test_a_long_interval_still_notices_the_job_end(tmp_path: Path) -> None:
    frozen_s = 1_800_000_000.5  # the clock never reaches the next tick: only the checks can end it
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_monitor(
                tmp_path,
                interval_ms=60_000,
                gpu_backend=ScriptedGpuBackend([]),
                clock_s=lambda: frozen_s,
            )
        )
    )
    thread.start()
    write_job_end_marker(tmp_path)
    thread.join(60)
    assert result == ["job ended"]
    assert system_records(tmp_path) == []


def test_a_job_shorter_than_the_interval_still_gets_a_snapshot_when_stopped(
    tmp_path: Path,
) -> None:
    stop = threading.Event()
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_monitor(tmp_path, interval_ms=60_000, gpu_backend=ScriptedGpuBackend([]), stop=stop)
        )
    )
    thread.start()
    time.sleep(0.3)  # the training, done long before the first tick
    stop.set()
    thread.join(60)
    assert result == ["stopped"]
    records = system_records(tmp_path)
    cpu = [r for r in records if r["Dimension"] == "CPUUtilization"]
    assert len(cpu) == psutil.cpu_count()
    assert len({round(r["Timestamp"], 1) for r in records}) == 1


def test_the_monitor_follows_the_interval_and_the_switch_of_the_job_config(tmp_path: Path) -> None:
    # what `stepscope update <job> --system-interval-ms N` and `--disable` write while it runs
    from stepscope.config import ProfilerConfig

    config_path = tmp_path / "profiler-config.json"
    ProfilerConfig(system_monitor_interval_millis=60_000).to_file(config_path)
    handle = start_monitor(
        tmp_path / "out", interval_ms=60_000, gpu_backend="none", config_path=config_path
    )
    log = tmp_path / "out" / "monitor-algo-1.log"

    def ticks() -> int:
        return len({round(r["Timestamp"], 1) for r in system_records(tmp_path / "out")})

    try:
        assert wait_for(lambda: log.exists() and "started" in log.read_text())
        ProfilerConfig(system_monitor_interval_millis=100).to_file(config_path)
        # a minute's interval gives at most one tick in this time: many mean the new one applies
        assert wait_for(lambda: ticks() >= 5, timeout_s=20)
        ProfilerConfig(system_monitor_interval_millis=100, disable_profiler=True).to_file(
            config_path
        )
        assert wait_for(lambda: "paused (profiler disabled)" in log.read_text())
        paused_at = ticks()
        time.sleep(0.5)
        assert ticks() == paused_at
    finally:
        assert handle.stop() == 0
    assert ticks() == paused_at, "a paused monitor takes no last snapshot either"


def test_a_wall_clock_stepped_back_neither_stops_sampling_nor_dates_samples_back(
    tmp_path: Path,
) -> None:
    # NTP steps the wall clock of the node an hour back half a second into the job: sampling goes
    # on at its interval, and samples stay in order on the clock the framework events use
    script = textwrap.dedent(
        f"""
        import threading, time
        wall = time.time
        started = wall()
        time.time = lambda: wall() - (3600.0 if wall() - started > 0.5 else 0.0)
        from stepscope.collect import ScriptedGpuBackend
        from stepscope.collect.monitor.loop import run_monitor
        stop = threading.Event()
        threading.Timer(2.5, stop.set).start()
        run_monitor({str(tmp_path)!r}, interval_ms=100, gpu_backend=ScriptedGpuBackend([]), stop=stop)
        """
    )
    before_s = time.time()
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    after_s = time.time()
    stamps = [r["Timestamp"] for r in system_records(tmp_path) if r["Name"] == "cpu0"]
    assert stamps == sorted(stamps)
    assert before_s <= stamps[0] and stamps[-1] <= after_s
    after_the_step = [s for s in stamps if s >= before_s + 1.5]
    assert len(after_the_step) >= 5


def test_the_monitor_log_gives_times_in_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on a node 13:45 h ahead of UTC, the log's times agree with the job's, which every page
    # and the report give in UTC
    monkeypatch.setenv("TZ", "Pacific/Chatham")
    before_s = time.time()
    handle = start_monitor(tmp_path, interval_ms=100, gpu_backend="none")
    assert handle.stop() == 0
    first = (tmp_path / "monitor-algo-1.log").read_text().splitlines()[0]
    stamp = " ".join(first.split()[:3])
    assert stamp.endswith(" UTC"), first
    logged_s = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S"))
    assert before_s - 1 <= logged_s <= time.time()

"""ConfigWatcher: a new configuration only after a real change; bad files never raise."""

from __future__ import annotations

import logging
import os

from stepscope.config import ConfigWatcher, FrameworkProfile, ProfilerConfig

WATCHER_LOGGER = "stepscope.config.watcher"


def test_initial_config_and_no_change(tmp_path) -> None:
    path = ProfilerConfig(system_monitor_interval_millis=200).to_file(tmp_path / "c.json")
    watcher = ConfigWatcher(path)
    assert watcher.config == ProfilerConfig(system_monitor_interval_millis=200)
    assert watcher.poll() is None
    assert watcher.poll() is None


def test_a_change_is_returned_once(tmp_path) -> None:
    path = ProfilerConfig().to_file(tmp_path / "c.json")
    watcher = ConfigWatcher(path)
    new = ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=3))
    new.to_file(path)
    assert watcher.poll() == new
    assert watcher.config == new
    assert watcher.poll() is None


def test_rewriting_the_same_content_is_not_a_change(tmp_path) -> None:
    path = ProfilerConfig().to_file(tmp_path / "c.json")
    watcher = ConfigWatcher(path)
    ProfilerConfig().to_file(path)  # new inode and mtime, same bytes
    assert watcher.poll() is None
    os.utime(path, ns=(1, 1))
    assert watcher.poll() is None


def test_invalid_content_keeps_the_old_config_with_one_warning(tmp_path, caplog) -> None:
    path = ProfilerConfig(system_monitor_interval_millis=1000).to_file(tmp_path / "c.json")
    watcher = ConfigWatcher(path)
    with caplog.at_level(logging.WARNING, logger=WATCHER_LOGGER):
        path.write_text('{"system_monitor_interval_millis": 10')  # half written
        assert watcher.poll() is None
        assert watcher.poll() is None
    assert len(caplog.records) == 1 and "c.json" in caplog.records[0].getMessage()
    assert watcher.config == ProfilerConfig(system_monitor_interval_millis=1000)
    ProfilerConfig(system_monitor_interval_millis=5000).to_file(path)
    assert watcher.poll() == ProfilerConfig(system_monitor_interval_millis=5000)


def test_invalid_values_keep_the_old_config(tmp_path, caplog) -> None:
    path = ProfilerConfig().to_file(tmp_path / "c.yaml")
    watcher = ConfigWatcher(path)
    with caplog.at_level(logging.WARNING, logger=WATCHER_LOGGER):
        path.write_text("system_monitor_interval_millis: 7\n")
        assert watcher.poll() is None
    message = caplog.records[0].getMessage()
    assert "system_monitor_interval_millis" in message
    assert ".;" not in message  # the error's full stop does not end the warning's sentence
    assert watcher.config == ProfilerConfig()


def test_a_deleted_file_keeps_the_config_and_a_new_one_is_picked_up(tmp_path, caplog) -> None:
    path = ProfilerConfig().to_file(tmp_path / "c.json")
    watcher = ConfigWatcher(path)
    path.unlink()
    with caplog.at_level(logging.WARNING, logger=WATCHER_LOGGER):
        assert watcher.poll() is None
        assert watcher.poll() is None
    assert len(caplog.records) == 1
    assert watcher.config == ProfilerConfig()
    ProfilerConfig(disable_profiler=True).to_file(path)
    assert watcher.poll() == ProfilerConfig(disable_profiler=True)


def test_a_file_that_does_not_exist_yet(tmp_path) -> None:
    watcher = ConfigWatcher(tmp_path / "later.json")
    assert watcher.config is None
    assert watcher.poll() is None
    ProfilerConfig().to_file(tmp_path / "later.json")
    assert watcher.poll() == ProfilerConfig()


def test_a_path_with_an_unknown_extension_never_raises(tmp_path, caplog) -> None:
    path = tmp_path / "c.txt"
    path.write_text("{}")
    with caplog.at_level(logging.WARNING, logger=WATCHER_LOGGER):
        watcher = ConfigWatcher(path)
    assert watcher.config is None
    assert len(caplog.records) == 1

"""UI settings (auto shutdown) and the auto shutdown itself, down to a real server stopping."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stepscope.errors import ConfigError
from stepscope.ui import create_app
from stepscope.ui.app import POLL_HEADER
from stepscope.ui.settings import (
    IdleShutdown,
    UISettings,
    default_settings_path,
    load_settings,
    save_settings,
)
from tests.servers import free_port


def test_defaults_are_sagemakers_enabled_after_two_hours():
    assert UISettings() == UISettings(auto_shutdown_enabled=True, auto_shutdown_threshold_hours=2.0)


@pytest.mark.parametrize("hours", [0, -1, 721, True, "2", None])
def test_bad_thresholds_name_the_parameter(hours):
    with pytest.raises(ConfigError, match="auto_shutdown_threshold_hours"):
        UISettings(auto_shutdown_threshold_hours=hours)


def test_settings_round_trip_and_missing_or_broken_files_give_defaults(tmp_path: Path):
    path = tmp_path / "deep" / "ui-settings.json"
    assert load_settings(path) == UISettings()
    save_settings(path, UISettings(auto_shutdown_enabled=False, auto_shutdown_threshold_hours=8))
    assert load_settings(path) == UISettings(False, 8)
    path.write_text("{not json")
    assert load_settings(path) == UISettings()
    path.write_text(json.dumps({"auto_shutdown_threshold_hours": -5}))
    assert load_settings(path) == UISettings()


def test_default_path_is_in_the_users_config_folder(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert default_settings_path() == tmp_path / "cfg" / "stepscope" / "ui-settings.json"


def test_idle_watchdog_calls_back_once_after_the_threshold():
    fired = threading.Event()
    watchdog = IdleShutdown(UISettings, fired.set, threshold_s=0.2, check_interval_s=0.02)
    watchdog.start()
    try:
        assert fired.wait(timeout=60)
    finally:
        watchdog.stop()


def test_disabled_auto_shutdown_has_no_threshold():
    watchdog = IdleShutdown(lambda: UISettings(auto_shutdown_enabled=False), lambda: None)
    assert watchdog.threshold_s() is None
    assert IdleShutdown(UISettings, lambda: None).threshold_s() == 2 * 3600
    assert IdleShutdown(lambda: UISettings(True, 0.5), lambda: None).threshold_s() == 1800


def test_background_polls_do_not_count_as_activity(tmp_path: Path, jobs_root: Path):
    app = create_app([jobs_root], settings_path=tmp_path / "s.json")
    client = TestClient(app, base_url="http://127.0.0.1")
    idle = app.state.ui.idle
    client.get("/api/jobs")
    before = idle.last_activity_s
    client.get("/api/jobs", headers={POLL_HEADER: "1"})
    assert idle.last_activity_s == before
    client.get("/api/jobs")
    assert idle.last_activity_s > before


def test_a_real_server_stops_by_itself_when_idle(tmp_path: Path, jobs_root: Path):
    port = free_port()
    code = (
        "import logging\nlogging.basicConfig(level=logging.INFO)\n"
        "from stepscope.ui import serve\n"
        f"serve([{str(jobs_root)!r}], port={port}, open_browser=False,"
        f" settings_path={str(tmp_path / 's.json')!r}, idle_threshold_s=6.0)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        answered = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None and not answered:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/settings") as response:
                    answered = json.load(response)["auto_shutdown_enabled"] is True
            except OSError:
                time.sleep(0.1)
        assert answered, "the server never answered"
        _, stderr = server.communicate(timeout=120)
        assert server.returncode == 0
        assert "no activity" in stderr and "shutting the UI down" in stderr
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_settings_that_cannot_be_saved_are_refused_naming_the_file(tmp_path: Path, jobs_root: Path):
    in_the_way = tmp_path / "config"
    in_the_way.write_text("")  # a file where the settings' folder should be
    path = in_the_way / "stepscope" / "ui-settings.json"
    client = TestClient(create_app([jobs_root], settings_path=path), base_url="http://127.0.0.1")
    response = client.put("/api/settings", json={"auto_shutdown_enabled": False})
    assert response.status_code == 500
    assert response.json()["detail"].startswith(f"Cannot save the settings to {path}: ")
    assert client.get("/api/settings").json()["auto_shutdown_enabled"] is True

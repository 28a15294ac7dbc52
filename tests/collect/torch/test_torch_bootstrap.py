"""The bootstrap: ``stepscope run``'s environment profiles a script that does not know about us."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.collect.torch.torchjob import TRAIN_SCRIPT, profiled_env, read_events, steps

from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

QUIET = ProfilerConfig(
    framework_profile_params=FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=10_000, num_steps=1)
    )
)


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    env = profiled_env(tmp_path / "job", QUIET)
    env["PYTHONPATH"] += os.pathsep + str(own)
    script = tmp_path / "train.py"
    script.write_text(
        TRAIN_SCRIPT + "\nimport os\nprint('user site', os.environ.get('USER_SITE_RAN'))\n"
    )
    result = subprocess.run(
        [sys.executable, str(script), "--steps", "3"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "user site yes" in result.stdout
    assert len(steps(read_events(tmp_path / "job"))) == 3


def test_a_bad_configuration_warns_and_the_script_runs_unprofiled(tmp_path: Path) -> None:
    env = profiled_env(tmp_path / "job", QUIET)
    Path(env["STEPSCOPE_CONFIG"]).write_text('{"framework_profile_params": {"num_steps": -3}}')
    result = _run(tmp_path, env, "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert "not profiling this process" in result.stderr
    assert result.stdout.count("loss ") == 2
    assert not (tmp_path / "job" / "profiler-output").exists()


def test_a_disabled_profiler_records_nothing(tmp_path: Path) -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(), disable_profiler=True)
    env = profiled_env(tmp_path / "job", config)
    result = _run(tmp_path, env, "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "job" / "profiler-output").exists()

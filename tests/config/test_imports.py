"""The configuration stage stays light: training processes import it at start-up."""

from __future__ import annotations

import subprocess
import sys


def test_config_imports_no_heavy_package_and_yaml_only_for_yaml(tmp_path) -> None:
    heavy = ["yaml", "torch", "pandas", "pyarrow", "duckdb", "numpy"]
    code = (
        "import sys\n"
        "from stepscope.config import ProfilerConfig, ConfigWatcher\n"
        f"path = {str(tmp_path / 'c.json')!r}\n"
        "ProfilerConfig().to_file(path); ConfigWatcher(path).poll()\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "", f"stepscope.config loaded: {result.stdout.strip()}"

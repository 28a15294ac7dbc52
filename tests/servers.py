"""Local servers for tests: a free port on 127.0.0.1, a web app served from a thread, and an
S3-compatible server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: how long a server may take to start on a busy machine
START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free 127.0.0.1 port; yields its base URL.

    The server runs in a daemon thread and is asked to exit (and joined) on leaving.
    """
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "the server did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


#: the AWS settings a test S3 server takes: any credentials do, in its one region
S3_TEST_SETTINGS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def s3_server(env: Any) -> Iterator[str]:
    """Serve the S3 API (moto) on a free 127.0.0.1 port, with the AWS environment set through
    ``env`` (a ``pytest.MonkeyPatch``) to reach it; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {**S3_TEST_SETTINGS, "AWS_ENDPOINT_URL": endpoint}.items():
        env.setenv(key, value)
    try:
        yield endpoint
    finally:
        server.stop()

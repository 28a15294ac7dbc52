"""Serving the UI with uvicorn: binding, the start-up line, the browser, auto shutdown.

:func:`serve` is what ``stepscope ui`` calls. It binds 127.0.0.1 unless told otherwise; any
other address gets a token (generated unless given) that the printed URL carries.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import webbrowser
from collections.abc import Sequence

from stepscope._optional import installed, require
from stepscope.errors import ConfigError, ServeError

__all__ = ["DEFAULT_PORT", "serve", "ui_installed"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 8765

#: what the UI runs on (the ``ui`` extra): the web framework, the server, plotly.js for charts
_UI_PACKAGES = ("fastapi", "uvicorn", "plotly")

#: addresses that bind every interface -> the loopback address the local browser opens
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def ui_installed() -> bool:
    """Whether the packages the UI runs on are installed (found, not imported)."""
    return all(installed(package) for package in _UI_PACKAGES)


def serve(
    roots: Sequence[str | os.PathLike[str]],
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    open_browser: bool = True,
    settings_path: str | os.PathLike[str] | None = None,
    idle_threshold_s: float | None = None,
) -> None:
    """Serve the Profiler UI until interrupted or shut down for inactivity.

    :param roots: folders (or trace files) to list jobs from.
    :param host: interface to bind; anything but loopback requires a token.
    :param port: TCP port.
    :param token: the token for a non-loopback bind (generated when ``None``); ignored on
        loopback, where the Host header check applies instead.
    :param open_browser: open the UI in the default browser once it listens.
    :param settings_path: see :func:`~stepscope.ui.app.create_app`.
    :param idle_threshold_s: see :func:`~stepscope.ui.app.create_app`.
    """
    for package in _UI_PACKAGES:
        require(package, extra="ui", feature="the Profiler UI")
    import uvicorn

    from stepscope.ui.app import create_app
    from stepscope.ui.security import is_loopback, new_token

    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError("serve.port", port, "an integer from 1 to 65535")
    if is_loopback(host):
        token = None
    elif token is None:
        token = new_token()
    holder: dict[str, uvicorn.Server] = {}

    def stop_serving() -> None:
        holder["server"].should_exit = True

    app = create_app(
        roots,
        token=token,
        settings_path=settings_path,
        idle_threshold_s=idle_threshold_s,
        on_idle=stop_serving,
    )
    listening = _listen(host, port)
    # a wildcard bind is reached from elsewhere by this machine's name, and from here on loopback
    url = _url(socket.gethostname() if host in _WILDCARDS else host, port, token)
    local_url = _url(_WILDCARDS.get(host, host), port, token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    holder["server"] = server
    logger.info("Profiler UI at %s (Ctrl+C to stop)", url)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, args=(local_url,)).start()
    try:
        server.run(sockets=[listening])
    except KeyboardInterrupt:
        # Ctrl+C, as the start-up line says: the server has shut down, uvicorn re-raised it
        logger.info("Profiler UI stopped")


def _url(host: str, port: int, token: str | None) -> str:
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}/" + (f"?token={token}" if token else "")


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed or opened: a port in use must
    not send the browser to whatever else listens there."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise ServeError(host, port, exc.strerror or str(exc)) from exc

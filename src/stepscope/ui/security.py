"""Who may talk to the UI server: loopback-only by default, a token when bound wider.

Bound to 127.0.0.1 (the default), the server answers only requests whose ``Host`` header names
the loopback interface, which stops a web page from reaching it through DNS rebinding. Bound to
another interface, a random token is required on every request, as Jupyter does: the start-up
line prints a URL with ``?token=...``; the first request with it sets an HttpOnly cookie and is
redirected to the same URL without the token, so later requests carry only the cookie. API
clients may send ``Authorization: Bearer <token>`` instead. In both modes, a request that changes
something (load, unload, settings) from a browser page of another origin is refused, so a web
site cannot drive the local UI through the user's browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

__all__ = ["COOKIE_NAME", "LOOPBACK_HOSTS", "AccessGuard", "is_loopback", "new_token"]

COOKIE_NAME = "stepscope_token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    """A fresh random token for a server bound beyond loopback."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _same_origin(request: Request) -> bool:
    """Whether a browser request comes from the UI's own pages (no cross-site form or fetch).

    Browsers send ``Origin`` on cross-origin writes; a request without it (curl, scripts) is
    not a cross-site request and is judged by the other rules.
    """
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _host_name(header: str) -> str:
    """``Host`` header without its port (``[::1]:8000`` -> ``::1``)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class AccessGuard:
    """HTTP middleware enforcing the rules above.

    :param token: the required token, or ``None`` for loopback-only mode (Host header check).
    """

    def __init__(self, token: str | None) -> None:
        self.token = token

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.method not in _SAFE_METHODS and not _same_origin(request):
            return JSONResponse(
                {"detail": "Changes are only accepted from the UI's own pages."}, status_code=403
            )
        if self.token is None:
            if _host_name(request.headers.get("host", "")) not in LOOPBACK_HOSTS:
                return JSONResponse(
                    {"detail": "This server only answers requests addressed to 127.0.0.1."},
                    status_code=403,
                )
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None and self._matches(given):
            query = urlencode(
                [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            )
            target = request.url.path + (f"?{query}" if query else "")
            response: Response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE_NAME, self.token, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if self._matches(request.cookies.get(COOKIE_NAME, "")) or self._matches(bearer):
            return await call_next(request)
        return JSONResponse(
            {"detail": "A token is required: open the URL with ?token=... printed at start-up."},
            status_code=401,
        )

    def _matches(self, candidate: str) -> bool:
        return (
            self.token is not None
            and bool(candidate)
            and hmac.compare_digest(candidate.encode(), self.token.encode())
        )

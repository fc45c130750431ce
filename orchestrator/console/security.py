"""Who may read the console, and what every answer carries.

The console shows a user's runs and can stop them, so every path, static files
included, needs the token printed with its URL (a new one at each start, as Jupyter's):
given once as ``?token=``, it is then carried by an HttpOnly, SameSite=Strict cookie and
the token leaves the address bar (a redirect to the same page without it). Tokens and
the CSRF token of the forms are compared in constant time. Every answer, a refusal
included, carries a strict Content-Security-Policy (only this server's own script,
styles and images; no inline script; no frames), no sniffing, no referrer and no caching.
A POST whose Origin is another site's is refused before any handler reads it.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_OURS = {name for name, _ in HEADERS}
TOKEN_PARAM = "token"
UNAUTHORIZED = (
    b"401 Unauthorized: open the console with the URL that python -m orchestrator action=console printed "
    b"(it carries the token of this console's start).\n"
)
FORBIDDEN_ORIGIN = b"403 Forbidden: a request from another site.\n"


@dataclass(frozen=True)
class Secrets:
    """This server start's token (read access) and CSRF token (its forms), and the cookie's name."""

    token: str = field(repr=False)
    csrf: str = field(repr=False)
    cookie: str = "orchestrator_console"

    @classmethod
    def new(cls, port: int = 0) -> Secrets:
        # A cookie per port: two consoles on one host (two homes) keep their own.
        return cls(secrets.token_hex(24), secrets.token_urlsafe(32), f"orchestrator_console_{port}")


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time that does not tell how much of it matched."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def with_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with ours in place of any of the same names."""
    return [(k, v) for k, v in headers if k.lower() not in _OURS] + list(HEADERS)


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or []:
        if k.lower() == name:
            return str(v.decode("latin-1"))
    return None


def _local_path(scope: Scope) -> str:
    """The request's path as sent, never one a browser reads as another host's ('//host')."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) and raw else quote(str(scope.get("path") or "/"))
    return "/" + path.lstrip("/")


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": with_headers(headers + (extra or []))})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: the token or its cookie on every request, our headers on every answer."""

    def __init__(self, app: ASGIApp, keys: Secrets) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # the console has none
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = parse_qsl((scope.get("query_string") or b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == TOKEN_PARAM]
        if given and same(given[-1], self.keys.token) and scope["method"] in ("GET", "HEAD"):
            # The token once, then its cookie: the same page again, without the token in its URL.
            rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
            cookie = f"{self.keys.cookie}={self.keys.token}; Path=/; HttpOnly; SameSite=Strict"
            location = _local_path(scope) + (f"?{rest}" if rest else "")
            await _answer(send, 303, b"", [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode())])
            return
        cookies = cookie_parser(_header(scope, b"cookie") or "")
        if not same(cookies.get(self.keys.cookie), self.keys.token):
            await _answer(send, 401, UNAUTHORIZED)
            return
        if scope["method"] not in ("GET", "HEAD") and not self._same_origin(scope):
            await _answer(send, 403, FORBIDDEN_ORIGIN)
            return

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_headers(list(message.get("headers") or []))}
            await send(message)

        await self.app(scope, receive, headed)

    @staticmethod
    def _same_origin(scope: Scope) -> bool:
        """A browser says where a POST comes from (Sec-Fetch-Site, Origin); one from another
        site is refused even with the cookie (SameSite=Strict already keeps it from being
        sent, and the form's CSRF token is still asked). Under our no-referrer policy a
        browser's own form says its Origin is "null": that alone tells nothing either way."""
        site = _header(scope, b"sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = _header(scope, b"origin")
        if origin is None or origin == "null":
            return True  # curl, a script, a test client; or a browser that does not say
        host = _header(scope, b"host")
        return host is not None and origin in (f"http://{host}", f"https://{host}")


def csrf_ok(form: dict[str, Any], keys: Secrets) -> bool:
    value = form.get("csrf")
    return isinstance(value, str) and same(value, keys.csrf)

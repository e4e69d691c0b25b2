"""What stands between the network and the engine: API keys, the request body's size and how it is read.

Keys come as ``Authorization: Bearer <key>`` (what OpenAI's clients send) or ``X-Api-Key: <key>``, and are
compared in constant time.  ``/health`` and the chat page are open (the page asks for a key itself).  A
body over ``max_body_bytes`` is refused before it is read whole: by its ``Content-Length``, or while a
chunked body streams in.
"""

from __future__ import annotations

import hmac
from typing import Any, Callable

from fastapi import Request, Security
from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, ErrorShapes


_BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="`Authorization: Bearer <key>`, as OpenAI's "
                     "clients send it")
_X_API_KEY = APIKeyHeader(name="X-Api-Key", auto_error=False, scheme_name="apiKey", description="`X-Api-Key: <key>`")


def key_tenant(index: int) -> str:
    """The tenant of the ``index``-th API key (0-based) for the scheduling policy: ``key-1``, ``key-2``...
    (named by position, so that neither a key nor a part of it reaches logs, metrics or a policy)."""
    return f"key-{index + 1}"


def request_tenant(request: Request, user: str | None) -> str:
    """Whom a request is served for: its API key's tenant, or with no keys configured the body's ``user``
    (a client that holds a key cannot choose another tenant)."""
    return getattr(request.state, "tenant", None) or user or ""


def require_api_key(keys: list[str]) -> Callable[..., Any]:
    """A FastAPI dependency: 401 unless the request carries one of ``keys`` (no keys: everything passes);
    a request let through with a key carries its tenant (:func:`key_tenant`) in ``request.state``.
    With keys, it declares the two ways as security schemes, for the OpenAPI schema (they read the headers
    and refuse nothing: the check below decides)."""
    if not keys:
        async def open_route() -> None:
            return

        return open_route
    which = key_index(keys)

    async def check(request: Request, _bearer: Any = Security(_BEARER), _header: Any = Security(_X_API_KEY)) -> None:
        index = which(request)
        if index is None:
            raise missing_key()
        request.state.tenant = key_tenant(index)

    return check


def key_index(keys: list[str]) -> Callable[[Request], int | None]:
    """Which of ``keys`` a request carries (its position), or None."""
    encoded = [k.encode("utf-8") for k in keys]

    def which(request: Request) -> int | None:
        header = request.headers.get("authorization", "")
        given = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        candidate = given.encode("utf-8")
        matches = [hmac.compare_digest(candidate, key) for key in encoded]  # each compared: no early exit
        return matches.index(True) if given and any(matches) else None

    return which


def missing_key() -> APIError:
    return APIError(401, "invalid or missing API key: send 'Authorization: Bearer <key>' or 'X-Api-Key'",
                    code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes``.

    The body is read here (the routes read it whole anyway) and handed on; reading stops at the limit, so
    a huge or endless chunked body costs at most ``max_bytes``.  Later ``receive`` calls reach the client,
    so a disconnect is still seen.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, shapes: ErrorShapes | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.shapes = shapes or ErrorShapes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        parts, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before sending it all
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            parts.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(parts), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await body_too_large(self.shapes, scope.get("path", ""), self.max_bytes)(scope, receive, send)


def body_too_large(shapes: ErrorShapes, path: str, max_bytes: int) -> Response:
    """The 413 of a body over ``max_bytes``, in the error shape of ``path``."""
    return shapes.response(path, 413, f"the request body is larger than this server allows ({max_bytes} bytes, "
                           "max_body_bytes)", code="body_too_large")


class JsonBodies:
    """ASGI middleware: every body is read as JSON, whatever its ``Content-Type`` says, as llama-server reads
    it (curl's ``-d`` sends ``application/x-www-form-urlencoded``; no route here takes a form)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-type"]
            given = dict(scope.get("headers") or []).get(b"content-type", b"")
            if b"json" not in given.lower():
                scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)

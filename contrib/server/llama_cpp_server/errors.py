"""Every error as OpenAI's error object (``{"error": {"message", "type", "param", "code"}}``), never a trace.

Handlers for the app: the server's own :class:`APIError`, FastAPI's validation errors (422, naming the
field), Starlette's HTTP errors (404 of an unknown route, 405...), ``ValueError`` from the library (a bad
request the engine refused: 400, its ``param`` the request field the message starts with) and anything
else (:class:`CatchAll`: 500, logged on the server, a generic message to the client).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable, Iterable, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llama_cpp.engine.normalize import PromptTooLongError

log = logging.getLogger("llama_cpp_server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 501: "not_supported_error",
          503: "server_error", 504: "timeout_error"}


class APIError(Exception):
    """An error the server answers with ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


def json_body(raw: bytes, empty: Any = None) -> Any:
    """The JSON of a body a route reads itself (``empty`` for a blank one, where the route allows it): a 400
    ``invalid_json`` for what is not JSON, nesting too deep to parse included (Python's parser recurses)."""
    if empty is not None and not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise APIError(400, "the request body is not valid JSON (or nests too deeply)", code="invalid_json") from None


def value_message(exc: ValueError) -> str:
    """What a ValueError says to the client: its message, but a sentence for the two whose own is Python's: a
    lone surrogate in the text (JSON's ``"\\ud800"`` escape pairs with nothing) and a body another route made
    and pydantic refused (its first error, where it is)."""
    if isinstance(exc, UnicodeEncodeError):
        return ("the text holds a lone surrogate (a \\ud800-\\udfff escape that pairs with no other): JSON "
                "text must be valid Unicode")
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{_location(tuple(first['loc']))}: {first['msg']}"
    return str(exc)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}


def prompt_too_long_body(exc: PromptTooLongError) -> dict[str, Any]:
    """A prompt the context cannot hold: llama-server's error type and its two counts, which its clients read
    to shorten the prompt."""
    body = error_body(400, str(exc), "prompt", "context_length_exceeded")
    body["error"].update(type="exceed_context_size_error", n_prompt_tokens=exc.n_prompt_tokens, n_ctx=exc.n_ctx)
    return body


#: another API's error object, for the routes that speak it: (status, message, param, code) -> (status, body)
ErrorShape = Callable[[int, str, "str | None", "str | None"], "tuple[int, dict[str, Any]]"]


class ErrorShapes:
    """Which error object a path answers with: OpenAI's, but under a prefix registered with another API's
    shape (Anthropic's routes answer in Anthropic's)."""

    def __init__(self, shapes: Mapping[str, ErrorShape] | None = None) -> None:
        self.shapes = dict(shapes or {})

    def response(self, path: str, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, body: dict[str, Any] | None = None) -> JSONResponse:
        """The error response at ``path``; ``body`` an OpenAI-shaped body of its own (llama-server's extra
        counts), used where the path speaks OpenAI's API."""
        for prefix, shape in self.shapes.items():
            if path == prefix or path.startswith(prefix + "/"):
                status, shaped = shape(status, message, param, code)
                return JSONResponse(shaped, status_code=status, headers=headers)
        return JSONResponse(body or error_body(status, message, param, code), status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    """``("body", "messages", 0, "role")`` -> ``messages[0].role``."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


_LEADING_PATH = re.compile(r"([A-Za-z_]\w*)((?:\[\d+\]|\.\w+)*)")


def _param_of(message: str, fields: frozenset[str]) -> str | None:
    """The request field a library error is about: its messages start with the keyword's name, or the
    path into it (``messages[0].role``)."""
    found = _LEADING_PATH.match(message)
    return found.group(0) if found and found.group(1) in fields else None


class CatchAll:
    """ASGI middleware: an exception no handler took (a bug) becomes a complete 500 in OpenAI's shape.

    Starlette's own last-resort handler sends its response and then raises the exception again, and
    uvicorn closes the connection on it, so a client's next request on that keep-alive connection was
    reset; here the exception ends with the response.  One raised after a response started (a stream
    sends its own error event first) can only end that response.
    """

    def __init__(self, app: ASGIApp, shapes: ErrorShapes | None = None) -> None:
        self.app = app
        self.shapes = shapes or ErrorShapes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:  # noqa: BLE001 - the client gets a clean 500, the log the details
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await self.shapes.response(scope.get("path", ""), 500, f"internal error ({type(exc).__name__}); "
                                           "the server's log has the details")(scope, receive, send)


def install(app: FastAPI, fields: Iterable[str] = (), keyed: Callable[[Request], bool] | None = None,
            shapes: ErrorShapes | None = None) -> None:
    """Register the handlers on ``app``; ``fields``: the request bodies' field names, which a library
    error's ``param`` may name; ``keyed``: whether a request carries a valid API key, when keys are required
    (a request without one learns nothing of the routes: 401 before 404, as llama-server answers);
    ``shapes``: the routes that answer in another API's error object."""
    known = frozenset(fields)
    shapes = shapes or ErrorShapes()

    def respond(request: Request, status: int, message: str, param: str | None = None,
                       code: str | None = None, headers: dict[str, str] | None = None,
                       body: dict[str, Any] | None = None) -> JSONResponse:
        return shapes.response(request.url.path, status, message, param, code, headers, body)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return respond(request, exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        param = _location(tuple(first.get("loc", ())))
        kind = str(first.get("type", ""))
        if kind == "json_invalid":
            return respond(request, 400, f"the request body is not valid JSON: {first.get('msg')}", None,
                                  "invalid_json")
        if param == "body" and kind in ("model_attributes_type", "dict_type", "missing"):
            return respond(request, 400, "the request body must be a JSON object", None, "invalid_body")
        if kind == "extra_forbidden":
            message = f"{param}: unknown field"
        else:
            message = f"{param}: {first.get('msg', 'invalid value')}"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return respond(request, 422, message + more, param, kind or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "There was an error parsing the body"
            return respond(request, 400, f"the request body is not valid UTF-8 (JSON must be UTF-8 encoded): "
                                  f"{exc.__cause__.reason} at byte {exc.__cause__.start}", None, "invalid_json")
        if exc.status_code == 404 and message == "Not Found":
            if keyed is not None and not keyed(request):
                return respond(request, 401, "invalid or missing API key: send 'Authorization: Bearer <key>' or "
                                      "'X-Api-Key'", None, "invalid_api_key", {"WWW-Authenticate": "Bearer"})
            message = f"no route {request.method} {request.url.path}"
        return respond(request, exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        message = value_message(exc)
        if isinstance(exc, PromptTooLongError):
            return respond(request, 400, message, "prompt", body=prompt_too_long_body(exc))
        return respond(request, 400, message, _param_of(message, known))

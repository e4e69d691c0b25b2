"""Every error as OpenAI's error object (``{"error": {"message", "type", "param", "code"}}``), never a trace.

Handlers for the app: the server's own :class:`APIError`, FastAPI's validation errors (422, naming the
field), Starlette's HTTP errors (404 of an unknown route, 405...), ``ValueError`` from the library (a bad
request the engine refused: 400) and anything else (500, logged on the server, a generic message to the
client).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("llama_cpp_server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error",
          504: "timeout_error"}


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


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    """``("body", "messages", 0, "role")`` -> ``messages[0].role``."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        param = _location(tuple(first.get("loc", ())))
        kind = first.get("type", "")
        if kind == "json_invalid":
            return error_response(400, f"the request body is not valid JSON: {first.get('msg')}", None, "invalid_json")
        if param == "body" and kind in ("model_attributes_type", "dict_type", "missing"):
            return error_response(400, "the request body must be a JSON object", None, "invalid_body")
        if kind == "extra_forbidden":
            message = f"{param}: unknown field"
        else:
            message = f"{param}: {first.get('msg', 'invalid value')}"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return error_response(422, message + more, param, kind or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return error_response(400, str(exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__}); the server's log has the details")

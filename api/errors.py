"""One error shape for every failure: ``{"error": {"type", "message", "param"}}``, never a stack trace."""

from __future__ import annotations

import logging

import aiohttp
from bentoml.exceptions import BentoMLException
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from serving.telemetry import telemetry

logger = logging.getLogger("textbento")


class ErrorDetail(BaseModel):
    type: str
    message: str
    param: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


# Declared on every route, so the OpenAPI schema tells clients (and schemathesis) the real shape.
ERROR_RESPONSES: dict[int | str, dict] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "request the served model cannot do",
        401: "missing or invalid API key",
        404: "unknown model name",
        413: "too many or too long inputs, or body too large",
        415: "body is not application/json",
        422: "invalid JSON or invalid fields",
        429: "too many requests in flight (Retry-After)",
        503: "runner overloaded or unavailable (Retry-After)",
        504: "not answered within the timeout (Retry-After)",
    }.items()
}


class APIError(Exception):
    """An error the client can act on; raised anywhere in a request, answered by the handlers below."""

    def __init__(self, status: int, type: str, message: str, param: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.param = status, type, message, param
        self.retry_after = retry_after


def error_response(error: APIError) -> JSONResponse:
    telemetry.rejected(error.type)
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    body = ErrorBody(error=ErrorDetail(type=error.type, message=error.message, param=error.param))
    return JSONResponse(body.model_dump(), status_code=error.status, headers=headers)


def _validation_error(exc: RequestValidationError) -> APIError:
    first = exc.errors()[0]
    location = [str(part) for part in first.get("loc", ()) if part != "body"]
    if first.get("type") == "json_invalid":
        return APIError(422, "invalid_json", f"request body is not valid JSON: {first.get('msg')}")
    param = ".".join(location) or None
    where = f"{param}: " if param else "request body: "
    return APIError(422, "invalid_request", where + str(first.get("msg")), param)


def _from_dependency(exc: BentoMLException) -> APIError:
    """The Encoder's errors, by status; its messages are internal and never reach the client."""
    status = int(exc.error_code)
    if status in (429, 503):
        return APIError(503, "overloaded", "the model runner is overloaded; retry shortly", retry_after=1)
    if status == 504:
        return APIError(504, "timeout", "the model runner did not answer in time")
    logger.error("model runner failed: %s", exc)
    return APIError(502, "runner_error", "the model runner failed to answer this request")


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception a request can raise to ``error_response``."""

    async def on_api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_validation_error(exc))

    async def on_http(_: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI wraps whatever broke while reading the body in a 400: unwrap it.
        if isinstance(exc.__cause__, APIError):
            return error_response(exc.__cause__)
        if isinstance(exc.__cause__, UnicodeDecodeError):
            return error_response(APIError(422, "invalid_json", "request body is not valid UTF-8 JSON"))
        return error_response(APIError(exc.status_code, "http_error", str(exc.detail)))

    async def on_dependency(_: Request, exc: BentoMLException) -> JSONResponse:
        return error_response(_from_dependency(exc))

    async def on_runner_unreachable(_: Request, exc: aiohttp.ClientError) -> JSONResponse:
        logger.error("model runner unreachable: %r", exc)
        return error_response(APIError(503, "runner_unavailable", "the model runner is unavailable; retry shortly", retry_after=1))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error", exc_info=exc)
        return error_response(APIError(500, "internal_error", "internal error; see the server log"))

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(BentoMLException, on_dependency)
    app.add_exception_handler(aiohttp.ClientError, on_runner_unreachable)
    app.add_exception_handler(Exception, on_unexpected)

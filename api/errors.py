"""One error shape for every failure, never a stack trace: ``{"error": {"type", "message", "param"}}``;
on text-embeddings-inference's routes TEI's own, ``{"error": message, "error_type": kind}``, which
its clients (huggingface_hub, LangChain's and LlamaIndex's TEI integrations) read; on Cohere's
(``/v2/``, ``/v1/embed``) Cohere's, ``{"id", "message"}``."""

from __future__ import annotations

import logging
import uuid
from typing import Literal

import aiohttp
from bentoml.exceptions import BentoMLException
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from serving.coalesce import ItemFailed
from serving.socket_hop import HopFailed
from serving.telemetry import telemetry

logger = logging.getLogger("textbento")


class ErrorDetail(BaseModel):
    type: str
    message: str
    param: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


# TEI's ErrorType names; the status stays textbento's (a 404 for an unknown model, 413 for too much).
TEIErrorType = Literal["Validation", "Overloaded", "Backend", "Unhealthy"]


class TEIErrorBody(BaseModel):
    error: str
    error_type: TEIErrorType


class CohereErrorBody(BaseModel):
    id: str
    message: str


TEI_ROUTES = frozenset(
    {"/", "/embed", "/embed_all", "/embed_sparse", "/predict", "/rerank", "/similarity", "/tokenize", "/decode", "/health", "/info"}
)


ERRORS = {
    400: "request the model cannot do",
    401: "missing or invalid API key",
    404: "unknown model name",
    413: "too many or too long inputs, or body too large",
    415: "body is not application/json",
    422: "invalid JSON or invalid fields",
    408: "request body not received within the body timeout",
    429: "too many requests in flight (Retry-After)",
    500: "the model failed on an input, or answered a number that is not finite",
    503: "the model's Encoder overloaded or unavailable, or the worker holding too many request bodies (Retry-After)",
    504: "not answered within the timeout (Retry-After)",
}
# Declared on every route, so the OpenAPI schema tells clients (and schemathesis) the real shape.
ERROR_RESPONSES: dict[int | str, dict] = {status: {"model": ErrorBody, "description": text} for status, text in ERRORS.items()}
TEI_ERROR_RESPONSES: dict[int | str, dict] = {status: {"model": TEIErrorBody, "description": text} for status, text in ERRORS.items()}
COHERE_ERROR_RESPONSES: dict[int | str, dict] = {status: {"model": CohereErrorBody, "description": text} for status, text in ERRORS.items()}


class APIError(Exception):
    """An error the client can act on; raised anywhere in a request, answered by the handlers below."""

    def __init__(self, status: int, type: str, message: str, param: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.param = status, type, message, param
        self.retry_after = retry_after


def error_response(error: APIError, path: str) -> JSONResponse:
    """The error in the shape of the route at ``path``: TEI's on TEI's routes, textbento's elsewhere."""
    telemetry.rejected(error.type)
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    if path in TEI_ROUTES:
        body = TEIErrorBody(error=error.message, error_type=tei_error_type(error)).model_dump()
    elif path.startswith("/v2/") or path == "/v1/embed":
        where = f"{error.param}: " if error.param and not error.message.startswith(error.param) else ""
        body = CohereErrorBody(id=str(uuid.uuid4()), message=where + error.message).model_dump()
    else:
        body = ErrorBody(error=ErrorDetail(type=error.type, message=error.message, param=error.param)).model_dump()
    return JSONResponse(body, status_code=error.status, headers=headers)


def tei_error_type(error: APIError) -> TEIErrorType:
    status = error.status
    if error.type == "unhealthy":
        return "Unhealthy"
    if status in (429, 503):
        return "Overloaded"
    return "Backend" if status >= 500 else "Validation"


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
        return APIError(503, "overloaded", "the model's Encoder is overloaded; retry shortly", retry_after=1)
    if status == 504:
        return APIError(504, "timeout", "the model's Encoder did not answer in time")
    logger.error("a model's Encoder failed: %s", exc)
    return APIError(502, "runner_error", "the model's Encoder failed to answer this request")


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception a request can raise to ``error_response``."""

    async def on_api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc, request.url.path)

    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_validation_error(exc), request.url.path)

    async def on_http(request: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI wraps whatever broke while reading the body in a 400: unwrap it.
        if isinstance(exc.__cause__, APIError):
            return error_response(exc.__cause__, request.url.path)
        if isinstance(exc.__cause__, UnicodeDecodeError):
            return error_response(APIError(422, "invalid_json", "request body is not valid UTF-8 JSON"), request.url.path)
        return error_response(APIError(exc.status_code, "http_error", str(exc.detail)), request.url.path)

    async def on_dependency(request: Request, exc: BentoMLException) -> JSONResponse:
        return error_response(_from_dependency(exc), request.url.path)

    async def on_failed_text(request: Request, failed: ItemFailed) -> JSONResponse:
        # A text the Encoder died computing, alone too (serving/hop.py): only the request that carried it fails.
        message = f"the model failed on text {failed.index} of this request ({failed.reason}); sent again, it would fail again"
        return error_response(APIError(500, "model_failed", message), request.url.path)

    async def on_encoder_unreachable(request: Request, exc: aiohttp.ClientError | HopFailed) -> JSONResponse:
        logger.error("a model's Encoder is unreachable: %r", exc)
        error = APIError(503, "runner_unavailable", "the model's Encoder is unavailable; retry shortly", retry_after=1)
        return error_response(error, request.url.path)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error", exc_info=exc)
        return error_response(APIError(500, "internal_error", "internal error; see the server log"), request.url.path)

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ItemFailed, on_failed_text)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(BentoMLException, on_dependency)
    app.add_exception_handler(aiohttp.ClientError, on_encoder_unreachable)
    app.add_exception_handler(HopFailed, on_encoder_unreachable)
    app.add_exception_handler(Exception, on_unexpected)

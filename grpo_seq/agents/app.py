"""The endpoint's routes: FastAPI over a :class:`~grpo_seq.agents.endpoint.PolicyEndpoint`.

``/rollouts/<id>/v1/chat/completions``, ``/rollouts/<id>/v1/completions`` and
``/rollouts/<id>/v1/models`` (recorded into rollout ``<id>``); the same under ``/v1`` (not
recorded). Every route needs the job's
key; every refusal is OpenAI's error body with its 4xx status, a malformed body included (400,
naming the field), so that an ``openai`` client raises with the endpoint's own words.

The handlers are plain functions: FastAPI runs them on its worker threads, where generation
waits its turn on the endpoint's lock.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from .endpoint import PolicyEndpoint
from .openai_format import APIError, ChatRequest, TextRequest, chat_chunks, error_body, text_chunks

__all__ = ["make_app", "reply_or_stream"]


def make_app(endpoint: PolicyEndpoint) -> FastAPI:
    """The FastAPI app serving ``endpoint`` (no docs pages: only the routes an OpenAI client uses)."""
    app = FastAPI(title="grpo-seq policy endpoint", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(APIError)
    def refused(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(error_body(e), status_code=e.status)

    @app.exception_handler(RequestValidationError)
    def malformed(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(error_body(APIError(400, f"malformed request: {where or 'body'}: {first.get('msg', e)}",
                                                param=where or None)), status_code=400)

    def authorized(authorization: str | None = Header(default=None)) -> None:
        endpoint.authorize(authorization)

    @app.get("/v1/models", dependencies=[Depends(authorized)])
    def models() -> dict[str, Any]:
        return endpoint.models()

    @app.get("/rollouts/{rollout_id}/v1/models", dependencies=[Depends(authorized)])
    def rollout_models(rollout_id: str) -> dict[str, Any]:
        return endpoint.models()

    @app.post("/v1/chat/completions", dependencies=[Depends(authorized)])
    def chat(request: ChatRequest) -> Any:
        return reply_or_stream(request, endpoint.complete(request, None), chat_chunks)

    @app.post("/rollouts/{rollout_id}/v1/chat/completions", dependencies=[Depends(authorized)])
    def rollout_chat(rollout_id: str, request: ChatRequest) -> Any:
        return reply_or_stream(request, endpoint.complete(request, rollout_id), chat_chunks)

    @app.post("/v1/completions", dependencies=[Depends(authorized)])
    def text(request: TextRequest) -> Any:
        return reply_or_stream(request, endpoint.complete_text(request, None), text_chunks)

    @app.post("/rollouts/{rollout_id}/v1/completions", dependencies=[Depends(authorized)])
    def rollout_text(rollout_id: str, request: TextRequest) -> Any:
        return reply_or_stream(request, endpoint.complete_text(request, rollout_id), text_chunks)

    return app


def reply_or_stream(request: ChatRequest | TextRequest, body: dict[str, Any], chunks: Any) -> Any:
    """The reply's body, or with ``stream: true`` its events (generated, and so checked, before the first)."""
    if not request.stream:
        return body
    usage = bool((request.stream_options or {}).get("include_usage"))
    return StreamingResponse(chunks(body, usage), media_type="text/event-stream")

"""OpenAI's ``/v1/chat/completions`` and ``/v1/models`` over the store's language models, so that
an agent program trained with ``grpo-seq train-agent`` points its ``openai`` client at the model
it trained: ``OpenAI(base_url=f"{url}/v1", api_key=<the service's token>)``.

The wire format is the agents endpoint's (:mod:`grpo_seq.agents.openai_format`), and so is the
rendering of the messages through the model's chat template (:mod:`grpo_seq.agents.prompts`).
``model`` names a language model of the store; ``temperature`` 0 (or left out) decodes greedily,
above 0 samples; ``max_tokens`` is bounded by ``--max_new_tokens``; ``stream`` answers in
server-sent events. Every refusal is OpenAI's
error body with its 4xx status (a wrong token too: :func:`auth_refusal`).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..agents.app import reply_or_stream
from ..agents.openai_format import APIError, ChatRequest, chat_chunks, completion_body, error_body, reply_message
from ..agents.prompts import PromptBuilder
from .requests import RequestError, parse_json
from .store import MODEL_NAME

__all__ = ["chat_routes", "auth_refusal", "MAX_CHOICES"]

MAX_CHOICES = 16  # most choices (n) of one call, as the agents endpoint allows


def auth_refusal(reason: str) -> JSONResponse:
    """A 401 under ``/v1/``: OpenAI's error body, so that the ``openai`` client raises its
    ``AuthenticationError``."""
    return JSONResponse(error_body(APIError(401, f"Incorrect API key provided: {reason}", code="invalid_api_key",
                                            kind="authentication_error")),
                        status_code=401, headers={"WWW-Authenticate": "Bearer"})


def _refused(e: APIError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status)


def _parse(raw: bytes) -> ChatRequest:
    try:
        return ChatRequest.model_validate(parse_json(raw))
    except RequestError as e:
        raise APIError(e.status, e.reason) from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or None
        raise APIError(400, f"malformed request: {where or 'body'}: {first.get('msg')}", param=where) from None


def _max_new(request: ChatRequest, most: int) -> int:
    if request.stop:
        raise APIError(400, "stop strings are not supported by this service: the reply ends at the model's end of "
                            "turn or max_tokens", param="stop")
    if request.logprobs:
        raise APIError(400, "logprobs are not returned by this service: leave logprobs unset", param="logprobs")
    if not 1 <= request.n <= MAX_CHOICES:
        raise APIError(400, f"n must be from 1 to {MAX_CHOICES}, got {request.n}", param="n")
    param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    asked = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    max_new = min(64, most) if asked is None else asked
    if not 1 <= max_new <= most:
        raise APIError(400, f"{param} must be from 1 to {most} (the service's --max_new_tokens), got {max_new}",
                       param=param)
    return max_new


def _sampling(request: ChatRequest) -> dict[str, Any]:
    """Greedy for ``temperature`` 0 or none; else sampled at it (and ``top_p``)."""
    t = request.temperature
    if t is not None and t < 0:
        raise APIError(400, f"temperature must be >= 0, got {t:g}", param="temperature")
    if request.top_p is not None and not 0 < request.top_p <= 1:
        raise APIError(400, f"top_p must be in (0, 1], got {request.top_p:g}", param="top_p")
    if not t:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": True, "temperature": t, "top_p": request.top_p or 1.0, "top_k": 0}


def _lm(service: Any, name: str) -> Any:
    """The loaded language model ``name``: 404 for a name the store lacks, 400 for an env policy."""
    if not MODEL_NAME.fullmatch(name) or not service.store.model_path(name).is_file():
        raise APIError(404, f"The model '{name}' does not exist: GET /v1/models lists this service's language "
                            "models", param="model", code="model_not_found")
    try:
        entry, model = service.models.cached(name) or service.models.get(name)
    except RequestError as e:
        raise APIError(e.status, e.reason, param="model") from None
    if entry["kind"] != "lm":
        raise APIError(400, f"The model '{name}' is an env policy, not a language model: ask it with POST /inference",
                       param="model", code="model_not_chat")
    return model


def _answer(service: Any, request: ChatRequest) -> dict[str, Any]:
    """The ``chat.completion`` of ``request`` (on a worker thread: loading and generating block)."""
    max_new, sampling = _max_new(request, service.cfg.max_new_tokens), _sampling(request)
    model = _lm(service, request.model)
    try:
        prompt = PromptBuilder(model.tokenizer).render(request.messages, request.tools)
    except (ValueError, TypeError, KeyError) as e:  # the template refused these messages
        raise APIError(400, f"the model's chat template cannot render these messages: {e}", param="messages") from None
    try:
        rows = model.chat(prompt, request.n, max_new, sampling)
    except RequestError as e:
        raise APIError(e.status, e.reason, param="messages", code="context_length_exceeded") from None
    choices = [{"message": reply_message(model.tokenizer.decode(ids, skip_special_tokens=True), bool(request.tools)),
                "ended": ended, "logprobs": [], "tokens": model.tokenizer.convert_ids_to_tokens(ids)}
               for ids, ended in rows]
    return completion_body(f"chatcmpl-{uuid.uuid4().hex}", request.model, choices, len(prompt), False)


def chat_routes(router: APIRouter, service: Any) -> None:
    @router.get("/v1/models")
    def models() -> dict[str, Any]:
        """The store's language models, as OpenAI lists models."""
        return {"object": "list", "data": [{"id": m["name"], "object": "model", "created": int(m.get("created", 0)),
                                            "owned_by": "grpo-seq"} for m in service.store.models()
                                           if m.get("kind") == "lm"]}

    @router.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        """A chat completion of a trained language model, in OpenAI's shapes (``stream``: as
        server-sent events of the whole reply, generated first)."""
        try:
            parsed = _parse(await request.body())
            body = await run_in_threadpool(_answer, service, parsed)
        except APIError as e:
            return _refused(e)
        return reply_or_stream(parsed, body, chat_chunks) if parsed.stream else JSONResponse(body)

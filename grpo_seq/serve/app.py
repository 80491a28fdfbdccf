"""The HTTP application: routes, bearer-token auth, one-line refusals, a bound on body size.

Every route but ``/health``, ``/docs``, ``/openapi.json`` and the page's two static files (``/``
and ``/page/app.js``, which hold no data: the page asks for the token and sends it with each of
its API calls) needs ``Authorization: Bearer <token>``. A refusal is ``{"detail": "<one line>"}``
with a 4xx status, and changes nothing on disk.
"""

from __future__ import annotations

import hmac
import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..jobs.spec import load_spec
from .chat import auth_refusal, chat_routes
from .config import ServeConfig
from .jobs import ACTIVE, JobManager
from .models import ModelCache, register, summary_of
from .requests import RequestError, observations, parse_json, resume_spec, train_spec
from .store import Store

__all__ = ["create_app", "Service"]

PAGE = Path(__file__).with_name("page")
_OBJECT = {"type": "object", "additionalProperties": True}
TRAIN_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    **_OBJECT, "example": {"env_name": "CartPole-v1", "total_timesteps": 20000, "model_name": "test", "seed": 0},
    "description": "A job spec's options (any of grpo-seq train-env's, or train-lm's with a dataset inside the "
                   "store's data/ and reward_fns by name); env_name, total_timesteps and model_name as the "
                   "Stable-Baselines3 service names them."}}}}}
INFERENCE_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    **_OBJECT, "example": {"model_name": "test", "observation": [0.01, -0.02, 0.03, 0.04]},
    "description": "observation: one observation or a list of them (-> action / actions); for a language model, "
                   "prompt and optional max_new_tokens (-> completion)."}}}}}
RESUME_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    **_OBJECT, "example": {"total_timesteps": 40000}}}}}}


class Service:
    """What the routes share: the options, the store, the jobs and the loaded models."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.store = Store(cfg.store)
        self.jobs = JobManager(self.store, cfg.max_jobs, on_done=lambda record: register(self.store, record))
        self.models = ModelCache(self.store, cfg.max_loaded_models)
        self.starting = threading.Lock()  # a count of running jobs and a start, as one step

    def record(self, job_id: str) -> dict[str, Any]:
        record = self.store.read_job(job_id) if job_id.isalnum() else None
        if record is None:
            raise RequestError(404, f"job {job_id!r}: no such job (GET /jobs lists them)")
        return record

    def check_room(self) -> None:
        if self.jobs.active() >= self.cfg.max_jobs:
            raise RequestError(429, f"{self.cfg.max_jobs} jobs are running already (--max_jobs); wait for one to "
                               "end or cancel one with DELETE /jobs/{id}")

    def train(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.starting:
            spec, name = train_spec(body, self.store, self.cfg)  # a bad body is a 400 naming its field, room or not
            self.check_room()
            if name is not None and (self.store.model(name) is not None or any(
                    r.get("model_name") == name and r.get("state") in ACTIVE for r in self.store.jobs())):
                raise RequestError(409, f"model_name {name!r}: a model or a running job has it already; choose "
                                   "another, or resume its job (POST /jobs/{id}/resume)")
            return self.jobs.start(spec, name)

    def resume(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.starting:
            record = self.record(job_id)
            if record["state"] in ACTIVE:
                raise RequestError(409, f"job {job_id}: still {record['state']}; resume it once it has ended")
            if self.jobs.view(record)["checkpoint"] is None:
                raise RequestError(409, f"job {job_id}: wrote no checkpoint, so there is nothing to resume")
            self.check_room()
            self._check_name_still_its_own(record)
            spec = resume_spec(load_spec(self.store.job_dir(job_id) / "spec.json"), body,
                               self.store.run_dir(job_id), self.cfg)
            record["resumes"] = record.get("resumes", 0) + 1
            return self.jobs.start(spec, None, record)


    def _check_name_still_its_own(self, record: dict[str, Any]) -> None:
        """A resumed job registers its model under its name when it ends: refuse it where another
        job's model, or another running job, has taken that name since."""
        name, job_id = record.get("model_name"), record["id"]
        model = self.store.model(name) if name else None
        other = model.get("job") if model is not None and model.get("job") != job_id else next(
            (r["id"] for r in self.store.jobs() if r.get("model_name") == name and r["id"] != job_id
             and r.get("state") in ACTIVE), None)
        if other is not None:
            raise RequestError(409, f"job {job_id}: its model_name {name!r} now belongs to job {other}; resuming "
                               "would re-point it to this job's model; train this job's spec under another model_name instead")


def _refusal(status: int, reason: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": reason}, status_code=status, headers=headers)


class BodyLimit:
    """Pure ASGI middleware: a body over ``limit`` bytes (declared or streamed) gets 413."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit
        self.reason = f"the body is over {limit:,} bytes (--max_body_bytes)"

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _refusal(413, self.reason)(scope, receive, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise RequestError(413, self.reason)
            return message

        await self.app(scope, counted, send)


class TokenCheck:
    """Pure ASGI middleware: every path but ``public`` needs ``Authorization: Bearer <token>``
    (an unknown path too: nothing is served without the token by forgetting to protect it).

    Checked before routing, once per request, rather than as a route dependency: a dependency
    is solved per request by the framework, and on the inference route that machinery costs more
    than the policy's forward pass."""

    def __init__(self, app: Any, token: str, public: frozenset[str]):
        self.app, self.token, self.public = app, token.encode(), public

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan" and scope["path"] not in self.public:
            reason = self.refusal(scope["headers"])
            if reason is not None and scope["type"] == "websocket":  # none is served; refused all the same
                return await send({"type": "websocket.close", "code": 1008})
            if reason is not None:  # under /v1/ (OpenAI's routes): in OpenAI's error shape
                refusal = auth_refusal(reason) if scope["path"].startswith("/v1/") else _refusal(401, reason)
                return await refusal(scope, receive, send)
        await self.app(scope, receive, send)

    def refusal(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """Why these headers are refused, or None: they carry the token."""
        value = next((v for k, v in headers if k == b"authorization"), b"")
        scheme, _, credentials = value.partition(b" ")
        credentials = credentials.strip()
        if not credentials or scheme.lower() != b"bearer":
            return "missing token: send Authorization: Bearer <token>"
        return None if hmac.compare_digest(credentials, self.token) else "wrong token"


def _document_token(app: FastAPI) -> None:
    """The OpenAPI description says every operation needs the bearer token (its page's Authorize
    button sends it); the public routes are left out of the description."""
    describe = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = describe()
            schema.setdefault("components", {})["securitySchemes"] = {"HTTPBearer": {
                "type": "http", "scheme": "bearer",
                "description": "the service's token (GRPO_SEQ_API_TOKEN, or printed at start)"}}
            schema["security"] = [{"HTTPBearer": []}]
        return app.openapi_schema

    app.openapi = openapi


def create_app(cfg: ServeConfig, token: str) -> FastAPI:
    """The application over ``cfg.store``; requests need ``token``."""
    service = Service(cfg)
    app = FastAPI(title="grpo-seq", description="Train, watch and query GRPO models.", version="1")
    app.state.service = service
    app.add_exception_handler(RequestError, lambda request, e: _refusal(e.status, e.reason))
    app.add_exception_handler(RequestValidationError, lambda request, e: _refusal(400, "; ".join(
        f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())))
    public = frozenset(p for p in ("/health", "/", "/page/app.js", app.docs_url, app.openapi_url, app.redoc_url,
                                   app.swagger_ui_oauth2_redirect_url) if p)
    app.add_middleware(TokenCheck, token=token, public=public)
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)  # added last: outermost, checked first
    router = APIRouter()
    _inference_routes(router, service)  # routes are matched in order: the busiest first
    chat_routes(router, service)  # /v1/chat/completions and /v1/models, OpenAI's shapes
    _job_routes(router, service)
    app.include_router(router)
    _public_routes(app)
    _document_token(app)
    app.router.on_shutdown.append(service.jobs.close)
    return app


def _job_routes(router: APIRouter, service: Service) -> None:
    @router.post("/train", status_code=202, openapi_extra=TRAIN_BODY)
    async def train(request: Request) -> JSONResponse:
        """Start a job in a process of its own; answers at once with its id."""
        record = await run_in_threadpool(service.train, parse_json(await request.body()))
        return JSONResponse(service.jobs.view(record), status_code=202)

    @router.get("/jobs")
    def jobs() -> dict[str, Any]:
        """Every job, oldest first."""
        return {"jobs": [service.jobs.view(r) for r in service.store.jobs()]}

    @router.get("/jobs/{job_id}")
    def job(job_id: str) -> dict[str, Any]:
        """A job's state, progress, latest metrics, error line and newest checkpoint."""
        return service.jobs.view(service.record(job_id))

    @router.delete("/jobs/{job_id}", status_code=202)
    def cancel(job_id: str, force: bool = False) -> dict[str, Any]:
        """Cancel a job: its process finishes the step, writes a checkpoint and exits; with
        ``?force=true`` it is killed at once (the step under way is lost, earlier checkpoints stay)."""
        record = service.jobs.cancel(service.record(job_id)["id"], force=force)
        if record is None:
            raise RequestError(409, f"job {job_id}: already {service.record(job_id)['state']}")
        return service.jobs.view(record)

    @router.post("/jobs/{job_id}/resume", status_code=202, openapi_extra=RESUME_BODY)
    async def resume(job_id: str, request: Request) -> JSONResponse:
        """Resume an ended job from its newest checkpoint with a larger budget."""
        record = await run_in_threadpool(service.resume, job_id, parse_json(await request.body()))
        return JSONResponse(service.jobs.view(record), status_code=202)

    @router.get("/jobs/{job_id}/metrics")
    def metrics(job_id: str, offset: int = Query(0, ge=0), limit: int = Query(500, ge=1, le=5000)) -> dict[str, Any]:
        """Rows ``offset`` .. ``offset + limit`` of the job's metrics.jsonl."""
        import json

        service.record(job_id)
        path = service.store.run_dir(job_id) / "metrics.jsonl"
        text = path.read_text() if path.is_file() else ""
        lines = text.split("\n")[:-1]  # a line still being written has no newline yet
        rows = [json.loads(line) for line in lines[offset:offset + limit]]
        return {"rows": rows, "offset": offset, "next_offset": offset + len(rows), "total": len(lines)}


def _inference_routes(router: APIRouter, service: Service) -> None:
    @router.get("/models")
    def models() -> dict[str, Any]:
        """The models the store holds, with their summaries."""
        return {"models": [summary_of(m) for m in service.store.models()]}

    @router.post("/inference", openapi_extra=INFERENCE_BODY)
    async def inference(request: Request) -> JSONResponse:
        """Greedy actions of an env policy, or a language model's greedy completion."""
        body = parse_json(await request.body())
        name = body.get("model_name")
        found = service.models.cached(name) or await run_in_threadpool(service.models.get, name)
        entry, model = found
        if entry["kind"] == "lm":
            return JSONResponse({"completion": await _complete(service, model, body)})
        obs, single = observations(body, model.obs_dim, service.cfg.max_batch)
        actions = model(obs).tolist()
        return JSONResponse({"action": actions[0]} if single else {"actions": actions})


async def _complete(service: Service, model: Any, body: dict[str, Any]) -> str:
    prompt, most = body.get("prompt"), service.cfg.max_new_tokens
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(400, "prompt: a language model takes a prompt (a non-empty string)")
    n = body.get("max_new_tokens", 64)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= most:
        raise RequestError(400, f"max_new_tokens: give a whole number in 1..{most} (--max_new_tokens), got {n!r}")
    return await run_in_threadpool(model.complete, prompt, n)


def _public_routes(app: FastAPI) -> None:
    index, script = (PAGE / "index.html").read_text(), (PAGE / "app.js").read_text()

    @app.get("/health", include_in_schema=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(index)

    @app.get("/page/app.js", include_in_schema=False)
    def page_script() -> Response:
        return Response(script, media_type="application/javascript")

"""The HTTP door: ``grpo-seq serve`` (or ``python -m grpo_seq.serve``) trains, watches and queries
models over HTTP, with a page to watch them on.

    GRPO_SEQ_API_TOKEN=secret grpo-seq serve --port 8000 --store runs/service
    curl -H 'Authorization: Bearer secret' -d '{"env_name": "CartPole-v1", "total_timesteps": 20000,
         "model_name": "test"}' localhost:8000/train
    curl -H 'Authorization: Bearer secret' -d '{"model_name": "test", "observation": [0, 0, 0, 0]}' \\
         localhost:8000/inference

A request body becomes a job spec (:mod:`.requests`), checked by the job layer's own code; each
job runs in a process of its own (:mod:`.worker`, :mod:`.jobs`) and writes into the store
(:mod:`.store`); finished models load once for inference (:mod:`.models`); the routes, the token
and the refusals are :mod:`.app`. Needs the ``serve`` extra (FastAPI, uvicorn).
"""

from .config import ServeConfig, parse_args, resolve_token

__all__ = ["ServeConfig", "parse_args", "resolve_token", "main"]


def main(argv: list[str] | None = None, prog: str = "python -m grpo_seq.serve") -> None:
    """Serve until stopped (see :func:`grpo_seq.serve.server.main`)."""
    from .server import main as serve

    serve(argv, prog)

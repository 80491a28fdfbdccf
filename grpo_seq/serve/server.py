"""``python -m grpo_seq.serve`` and ``grpo-seq serve``: the service on uvicorn."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError
from .config import TOKEN_ENV, parse_args, resolve_token

__all__ = ["main"]


def main(argv: Sequence[str] | None = None, prog: str = "python -m grpo_seq.serve") -> None:
    """Parse the options, settle the token (printed once when generated), serve until stopped."""
    cfg = parse_args(argv, prog)
    try:
        token, generated = resolve_token(cfg.host)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    # numpy's BLAS on one thread: a batch of observations through a small MLP is a few microseconds
    # of math, and BLAS threads spinning beside the event loop cost ten times that (set before numpy loads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    store_lock = claim_store(cfg.store)  # before the service's imports (seconds): a store in use is told at once
    try:
        import uvicorn

        from .app import create_app
    except ImportError as e:
        store_lock.release()
        print(f"error: the service needs the serve extra ({e}); pip install 'grpo-seq[serve]'", file=sys.stderr)
        raise SystemExit(2) from None
    app = create_app(cfg, token)
    app.router.on_shutdown.append(store_lock.release)  # uvicorn ends a SIGTERM by raising it again: no finally runs
    if generated:
        print(f"API token (send it as 'Authorization: Bearer <token>'; set {TOKEN_ENV} to choose it): {token}",
              flush=True)
    print(f"grpo-seq serve: http://{cfg.host}:{cfg.port}/ (the page), /docs (the API), store {app.state.service.store.root}",
          flush=True)
    try:
        uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
    finally:  # a start that failed (the port taken)
        store_lock.release()


def claim_store(store: str) -> Any:
    """The store's lock, held while this service runs: a second service on the same store would
    take the first one's running jobs for dead ones, and both would start jobs past --max_jobs."""
    from ..errors import UsageError
    from ..io.run_dir import RunLock

    try:
        return RunLock(Path(store).expanduser(), holder="service", option="--store").acquire()
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as e:  # a file, a read-only mount
        print(f"error: --store {store}: cannot hold the service's folders ({e.strerror or e})", file=sys.stderr)
        raise SystemExit(2) from None

"""The endpoint's HTTP server: uvicorn on 127.0.0.1, in a background thread, for a job's life.

The port is bound here, before the thread starts, and listening at once: a port already taken is
one :class:`~grpo_seq.errors.UsageError` naming it, and a client that connects before uvicorn's
loop is up waits in the socket's backlog rather than being refused, so no one polls for
readiness.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from ..errors import UsageError

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """Serves ``app`` on ``127.0.0.1:port`` (0: a free port) from a daemon thread until :meth:`stop`."""

    def __init__(self, app: Any, port: int = 0, option: str = "--endpoint_port"):
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.bind(("127.0.0.1", port))
        except OSError as e:
            self.sock.close()
            raise UsageError(f"{option} {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e}); give a free "
                             "port, or 0 for any") from None
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="grpo-seq-endpoint", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Ask uvicorn to finish and wait for its thread (a call in flight ends first)."""
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

"""The runtime's app over the fake backend, served by uvicorn on this machine's loopback in a thread: streamed
answers (Server-Sent Events, WebSockets) arrive as they are sent, which the in-process TestClient cannot show."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import uvicorn


@contextmanager
def serve(app, **config) -> Iterator[str]:
    """Yields the base URL (http://127.0.0.1:PORT) while the server runs; stops it after. `config`: more of
    uvicorn's settings (the runtime's `http` protocol class)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                           **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

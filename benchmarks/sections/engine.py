"""What the Docker sections share: whether an engine answers, the local test images, readiness timing.

These sections import the engine harness and image recipes from `tests/engine` (deliberately, and only
here, lazily): the harness stands in for the pulumi-docker provider (no Pulumi CLI or provider plugin can be
installed on these machines) and the recipes build the busybox and Debian test images locally — nothing is
ever pulled, there is no registry. The non-Docker sections import nothing from `tests`.
"""

from __future__ import annotations

import http.client
import importlib
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

SERVE_PORT = 8000
# A server that answers HTTP once it listens: "ready" means this answers from the host.
SERVE = ["python3", "-m", "http.server", str(SERVE_PORT), "--bind", "0.0.0.0", "--directory", "/tmp"]
SLEEPER = ["sh", "-c", "while true; do sleep 3600; done"]


def unavailable() -> str | None:
    """None when the Docker sections can run here, else one line saying why not."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed (pip install -e '.[test]')"
    try:
        importlib.import_module("testbed.harness.harness")  # the engine harness lives in the test tree
    except ImportError as error:
        return f"the engine harness (tests/engine) cannot be imported: {error}"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as error:  # any failure to reach the daemon means the same thing here
        first = (str(error).splitlines() or [type(error).__name__])[0]
        return f"no Docker daemon answers ({first[:160]})"
    return None


@dataclass
class Images:
    busybox: str
    debian: str   # python3, squid, curl: the infra image and the image of sandboxes that serve HTTP


def images(client) -> Images:
    """The locally built test images (built from Debian packages when missing, cached by content)."""
    from testbed import images as recipes

    return Images(recipes.busybox_image(client), recipes.debian_image(client))


def docker_time(rfc3339: str) -> float:
    """Seconds since the epoch of a Docker timestamp (nanoseconds cut to microseconds)."""
    return datetime.fromisoformat(rfc3339[:26].rstrip("Z") + "+00:00").timestamp()


def host_port(container, port: int = SERVE_PORT) -> int | None:
    """The host port published for `port`/tcp, once Docker has assigned it."""
    container.reload()
    bindings = (container.attrs["NetworkSettings"].get("Ports") or {}).get(f"{port}/tcp") or []
    return int(bindings[0]["HostPort"]) if bindings else None


def answers(port: int) -> bool:
    """An HTTP request to 127.0.0.1:`port` (a published port on this machine) gets a 200."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


class ReadyWatch:
    """Watches for a container by name and records create → ready: from Docker's `Created` timestamp to the
    first HTTP answer on its published port (same host clock for both).

    Started before whatever creates the container (a harness apply, a `docker run`), so a slow caller that
    returns long after the container started does not inflate the figure: the poll runs beside it."""

    def __init__(self, client, name: str, timeout: float = 120, interval: float = 0.02):
        self.client, self.name, self.timeout, self.interval = client, name, timeout, interval
        self.seconds: float | None = None
        self.error: str | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "ReadyWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._thread.join(self.timeout + 5)

    def result(self) -> float:
        self._thread.join(self.timeout + 5)
        if self.seconds is None:
            raise RuntimeError(f"{self.name} never answered on its published port: {self.error or 'timeout'}")
        return self.seconds

    def _watch(self) -> None:
        import docker.errors

        deadline = time.time() + self.timeout
        container, port = None, None
        while time.time() < deadline:
            try:
                container = container or self.client.containers.get(self.name)
                port = port or host_port(container)
            except docker.errors.NotFound:
                pass
            if port and answers(port):
                self.seconds = time.time() - docker_time(container.attrs["Created"])
                return
            time.sleep(self.interval)
        self.error = f"no answer within {self.timeout} s (port {port})"


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def remove(client, name: str) -> None:
    import docker.errors

    try:
        client.containers.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass

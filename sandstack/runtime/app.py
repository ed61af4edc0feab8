"""The runtime's HTTP API (FastAPI): bearer-token auth, one audit line per call, errors as JSON without a
traceback, and the routes (one module per resource: sandstack.runtime.routes) over the runtime's parts."""

from __future__ import annotations

import inspect
import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable

from fastapi import FastAPI

from sandstack.plan.runtime import RuntimeConfig
from sandstack.runtime.answers import AsciiJSON, install_errors
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.audited import Audited
from sandstack.runtime.metrics import Source, make_metrics
from sandstack.runtime.routes import ROUTERS
from sandstack.runtime.reload import ConfigSets, Reloader
from sandstack.runtime.service import Runtime
from sandstack.runtime.session_keys import owner, shown
from sandstack.runtime.threads import widen_threads
from sandstack.runtime.tokens import Tokens
from sandstack.runtime.wake_rate import WakeRate

log = logging.getLogger("sandstack.runtime")
VERSION = "1"


def create_app(runtime: Runtime | None, *, token: str = "", audit: AuditLog | None = None,
               monitor: bool = True, tokens: Tokens | None = None, config_dir: Path | None = None,
               tokens_for: Callable[[RuntimeConfig], Tokens] | None = None,
               restart: Callable[[str], None] | None = None) -> FastAPI:
    """The API over `runtime` (None only to render the OpenAPI document); `tokens`: the host's and the scoped
    ones (default: `token` alone). `config_dir`: the configuration volume whose sets are taken in place
    (sandstack.runtime.reload); `tokens_for`: the tokens a new configuration's scopes give (ValueError when one's
    secret is missing), else the tokens stay as they are; `restart(digest)`: ends this process for a set only a new
    one can take (another address or port), else such a set is refused."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start_monitor() -> None:
        if runtime is not None and monitor:
            threads.append(threading.Thread(target=_monitor, args=(runtime, stop), name="sandstack-monitor",
                                            daemon=True))
            threads[-1].start()
        if runtime is not None and config_dir is not None:
            watch = reloader(app, runtime, config_dir, tokens_for, restart)
            threads.append(threading.Thread(target=watch.run, args=(stop,), name="sandstack-config", daemon=True))
            threads[-1].start()

    def stop_monitor() -> None:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        if runtime is not None and monitor:
            runtime.shutdown()  # no on-demand container outlives the runtime (docs/design/ondemand.md)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        widen_threads()
        start_monitor()
        yield
        stop_monitor()

    # FastAPI takes `lifespan` from 0.93; Debian's (the infra image's) is 0.92, where the app's startup and
    # shutdown events start and stop the monitor instead.
    modern = "lifespan" in inspect.signature(FastAPI.__init__).parameters
    # The document is served only with the token (routes.host): it names every operation and limit of the host.
    app = FastAPI(title="sandstack runtime", version=VERSION, docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=AsciiJSON,
                  description="Sessions claim the warm sandboxes sandstack declared on this host, run commands, "
                              "move files, snapshot, branch, pause and resume them, and release them.",
                  **({"lifespan": lifespan} if modern else {}))
    if not modern:
        app.router.on_startup.append(widen_threads)
        app.router.on_startup.append(start_monitor)
        app.router.on_shutdown.append(stop_monitor)
    app.state.runtime, app.state.audit = runtime, audit
    app.state.wakes = WakeRate()  # per URL site (routes.wake)
    app.state.tokens = tokens or Tokens(token)
    source = None if runtime is None else Source(runtime.live, runtime.store, runtime.storage)
    metrics = app.state.metrics = make_metrics(source)
    if runtime is not None:
        runtime.metrics = metrics  # the runtime's own operations feed it too (Metrics.created, hibernated...)
        if audit is not None:
            runtime.monitor.on_ended = lambda session, sandbox, cause: audit.record(
                who="runtime", operation="session ended", outcome=cause, status=410, session=shown(session),
                sandbox=sandbox, scope=owner(session))
    install_errors(app)
    app.add_middleware(Audited, audit=audit, metrics=metrics)  # every call's audit line and metrics
    for router in ROUTERS:
        app.include_router(router)
    return app


def reloader(app: FastAPI, runtime: Runtime, config_dir: Path,
             tokens_for: Callable[[RuntimeConfig], Tokens] | None,
             restart: Callable[[str], None] | None = None) -> Reloader:
    """The watch of the configuration volume: a set is checked as at start (the runtime's own checks, every token
    scope's secret), then swapped in with the tokens its scopes give."""
    def check(config: RuntimeConfig) -> None:
        runtime.check_config(config)
        if tokens_for is not None:
            tokens_for(config)

    def apply(config: RuntimeConfig, digest: str) -> None:
        scoped = tokens_for(config) if tokens_for is not None else None
        runtime.reconfigure(config, digest)
        if scoped is not None:
            app.state.tokens = scoped

    return Reloader(ConfigSets(config_dir), lambda: runtime.live.digest, check, apply, restart)


def _monitor(runtime: Runtime, stop: threading.Event) -> None:
    while not stop.wait(runtime.config.idle_check_seconds):
        try:
            runtime.monitor_once()
        except Exception:  # the monitor must outlive any one bad pass
            log.exception("monitor pass failed")

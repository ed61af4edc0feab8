"""The runtime's routes, one module per resource (each its own APIRouter): sessions, pools, sandboxes, processes
(the blocking exec among them), terminal, watch, files, snapshots, wake, a URL's check, and the host's own (health, audit,
metrics, the API document)."""

from __future__ import annotations

from fastapi import APIRouter

from sandstack.runtime.routes import files, host, pools, processes, sandboxes, sessions, snapshots, terminal, \
    url_auth, wake, watch

ROUTERS: tuple[APIRouter, ...] = (host.router, sessions.router, pools.router, sandboxes.router, processes.router,
                                  files.router, snapshots.router, host.v1, wake.router, url_auth.router,
                                  terminal.router, watch.router)

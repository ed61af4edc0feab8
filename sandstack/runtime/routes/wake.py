"""Waking a site's sandbox: `GET /v1/wake?site=<port>-<pool>-<replica>.<domain>`, what the ingress calls when a
request to one of a hibernated sandbox's URLs finds no upstream (docs/design/ondemand.md). The site is a query
parameter, not a JSON body: Caddy's `reverse_proxy` can rewrite a request's method and URI (`{host}` in it) but
cannot give it a body. A GET although it changes state: Caddy sends no body with a copy it rewrote to GET or
HEAD, and with any other method it would send the visitor's request body, which the failed first try at the
sleeping sandbox has closed by then: the wake itself failed (502) for every request with a body. Only the
ingress's token and the operators' may wake; the token is a header, so no page a browser loads can.

The request names the site and its sandbox (`&sandbox=`): the ingress's Caddyfile writes each site's sandbox into
its wake (sandstack.plan.ingress), so the runtime's configuration holds no sites and a url port, a replica's site or
the domain changed never reloads it. The sandbox must be one of this host's pools' (a retired pool's too, while its
sessions last); the site is what the answer, the audit line and the wake rate name. A hibernated sandbox is
resumed (started, its files written back, its readiness probe passed), a paused one unpaused, a bound one left as
it is; the answer says which status it has now, and nothing else of the session (the ingress needs no session id).
A sandbox with no session (idle, absent, creating) has nothing to wake: 409. A site that woke its sandbox
`session.wakes_per_hour` times in the last hour is refused (429; sandstack.runtime.wake_rate); the ingress answers
every refusal alike.

The ingress's token (`SANDSTACK_RUNTIME_WAKE_TOKEN`, scope 'ingress-wake') has no pool: every other route treats
it as a token of no pools (404 for every session, sandbox, snapshot and pool, 403 for the operators' reads), so
it may wake a site and do nothing else. The host's token may wake any site, a scoped token its pools' sites.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.models import SANDBOX_PATTERN, pattern
from sandstack.runtime.routes.common import ERRORS, note, require_token, runtime_of, scope_of
from sandstack.runtime.tokens import pool_level

SITE_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$"  # a DNS host name, as the ingress's Host header carries it
WAKES = ("hibernated", "paused", "bound")


class WakeAnswer(BaseModel):
    site: str
    status: Literal["bound"] = Field(description="The sandbox's status after the wake: always 'bound'.")
    woke: bool = Field(description="Whether it was hibernated or paused (false: it was bound already).")


router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.get("/wake", response_model=WakeAnswer, operation_id="wake")
def wake(request: Request, site: str = Query(..., description="The site's host name, without a port.",
                                             **pattern(SITE_PATTERN)),
         sandbox: str = Query(..., description="The site's sandbox (the ingress's Caddyfile names it).",
                              **pattern(SANDBOX_PATTERN))) -> Any:
    """Bring a site's sandbox back if its session hibernated (or paused) it; the ingress calls this when a
    request to the site finds no upstream, then sends the request again."""
    runtime, scope = runtime_of(request), scope_of(request)
    pool_level(scope, "a wake")
    site = site.lower()
    pool = runtime.config.pool_of(sandbox)
    if pool is None or not (scope.wake or scope.allows(pool)):
        raise ApiError(404, f"site {site!r} is not on host {runtime.host!r}", site=site, host=runtime.host)
    row = runtime.sandboxes.get(sandbox)
    note(request, sandbox=sandbox, session=row.session)
    request.state.pool = pool
    if row.session is None or row.status not in WAKES:
        raise conflict(f"site {site!r}: its sandbox has no session to wake ({row.status})", site=site,
                       status=row.status)
    limit = runtime.config.pools[pool].wakes_per_hour
    if row.status != "bound" and not request.app.state.wakes.take(site, limit):
        raise ApiError(429, f"site {site!r} woke its sandbox {limit} times in the last hour "
                            "(`session.wakes_per_hour`)", site=site, wakes_per_hour=limit)
    # One wake at a time per sandbox: the others wait on it and answer woke=false (sandstack.runtime.hibernate).
    return {"site": site, "status": "bound", "woke": runtime.hibernation.wake(sandbox)}

"""Who may open a session's URLs (`urls.auth: session`, docs/design/ingress.md): `GET /v1/url-auth?site=<host>`,
what the ingress asks before each request to such a site (Caddy's `forward_auth`; it sends the visitor's headers,
the request's URI in X-Forwarded-Uri, and no body).

Only the ingress's token (and the operators') may ask; the visitor's own token travels apart from it: in the
X-Sandstack-Token header (a program), the `sandstack_session` cookie (a browser), or on a first visit the
`sandstack_token` query parameter, which is answered 303 to the same URL without it and sets the cookie (HttpOnly,
Secure, SameSite=Lax, for that site only), so the token leaves the address bar and the history at once.

The site's sandbox comes with the request (`&sandbox=`, written into the ingress's Caddyfile per site), so the
runtime's configuration holds no sites. The answer is 204 when the token is a live token of the session bound to
that sandbox. Everything else — no
token, another session's, a released or expired one, a site that is not declared, a sandbox with no session — gets
the same 401, so no visitor learns which sites, sandboxes or sessions exist. Passing checks are not audited (each
page's every asset asks once); refusals and the cookie swaps are.
"""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fastapi import APIRouter, Depends, Query, Request, Response

from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import SANDBOX_PATTERN, pattern
from sandstack.runtime.routes.common import ERRORS, note, require_token, runtime_of, scope_of
from sandstack.runtime.routes.wake import SITE_PATTERN
from sandstack.runtime.tokens import pool_level
from sandstack.spec.contract import URL_AUTH_COOKIE, URL_AUTH_HEADER, URL_AUTH_QUERY

REFUSED = "a session token for this site is required"
COOKIE_HOURS = 12  # the cookie outlives no session: the token's own lifetime and the session's end still hold

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.get("/url-auth", status_code=204, operation_id="url_auth", response_class=Response)
def url_auth(request: Request, site: str = Query(..., description="The site's host name, without a port.",
                                                 **pattern(SITE_PATTERN)),
             sandbox: str = Query(..., description="The site's sandbox (the ingress's Caddyfile names it).",
                                  **pattern(SANDBOX_PATTERN))) -> Response:
    """Whether the visitor holds the token of the session bound to the site's sandbox (the ingress asks this before
    each request to a site of `urls.auth: session`)."""
    runtime, scope = runtime_of(request), scope_of(request)
    pool_level(scope, "a URL's check")
    if not (scope.wake or scope.operator):
        raise ApiError(403, "a URL's check is for the ingress's token", scope=scope.name)
    site = site.lower()
    uri = request.headers.get("x-forwarded-uri", "/")
    from_query, token = _token(request, uri)
    visitor = runtime.session_tokens.scope(token) if token else None
    row = runtime.store.sandbox(sandbox) if runtime.config.pool_of(sandbox) else None
    if row is None or visitor is None or not visitor.holds(row):
        note(request, sandbox=sandbox)
        raise ApiError(401, REFUSED)
    note(request, sandbox=sandbox, session=row.session)
    request.state.pool = row.pool
    if not from_query:
        request.state.quiet = True  # a page's every asset passes here: the refusals and swaps are what is audited
        return Response(status_code=204)
    answer = Response(status_code=303, headers={"Location": _without_token(uri), "Cache-Control": "no-store"})
    answer.set_cookie(URL_AUTH_COOKIE, token, max_age=COOKIE_HOURS * 3600, path="/", secure=True, httponly=True,
                      samesite="lax")
    return answer


def _token(request: Request, uri: str) -> tuple[bool, str]:
    """(whether it came in the URL, the visitor's token): the URL's first, then the header, then the cookie."""
    for key, value in parse_qsl(urlsplit(uri).query, keep_blank_values=True):
        if key == URL_AUTH_QUERY:
            return True, value
    if given := request.headers.get(URL_AUTH_HEADER):
        return False, given
    cookie = SimpleCookie()
    try:
        cookie.load(request.headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header holds no token of ours
        return False, ""
    morsel = cookie.get(URL_AUTH_COOKIE)
    return False, morsel.value if morsel else ""


def _without_token(uri: str) -> str:
    """The visitor's URI (a path, as X-Forwarded-Uri carries it) without the token parameter."""
    parts = urlsplit(uri)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != URL_AUTH_QUERY])
    return urlunsplit(("", "", parts.path or "/", query, parts.fragment))

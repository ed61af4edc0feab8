"""The runtime's Prometheus metrics (prometheus_client), served at `GET /metrics` with the host's token.

Counted as calls pass through the app (claims and their latency, execs, errors by kind) and read from the
state at each scrape (sandboxes by pool and status, snapshots): a gauge computed from SQLite cannot drift from
what `GET /v1/sandboxes` says. One registry per app, so two runtimes in one process (the tests) do not mix.
The Grafana dashboard in docs/runtime-dashboard.json plots these names (a test checks each panel's metric is
served).

Hooks for the runtime's own operations (on-demand creation, hibernation): `Metrics.created(pool, seconds)` and
`Metrics.hibernated(pool)` / `Metrics.resumed(pool, seconds)`; a sandbox's status (bound, hibernated, ...) is
counted by the state gauge whatever its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # an infra image built before it listed python3-prometheus-client: serve without metrics
    CollectorRegistry = None  # type: ignore[assignment,misc]

from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError
from sandstack.runtime.interfaces import Storage
from sandstack.runtime.store import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "sandstack_runtime"
# Seconds: a warm claim takes milliseconds; an on-demand one, a container start; a restore, longer.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The pool label of a call naming a pool this host does not declare: any caller (the ingress's wake-only token
# included) may name any pool, and each new label value is a series kept for the runtime's life. No pool name can
# be this one (they start with a letter: models.POOL_PATTERN).
UNDECLARED = "(undeclared)"


def error_kind(status: int) -> str:
    """What an error answer was, as one label value (a bounded set: never a message or a name)."""
    return {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict",
            413: "too_large", 422: "invalid", 499: "client_closed", 502: "sandbox_or_docker", 503: "no_capacity",
            504: "timeout", 507: "no_space"}.get(status, "internal" if status >= 500 else "other")


@dataclass(frozen=True)
class Source:
    """What a scrape reads: the configuration in force, the store, the pools' storage."""

    live: Live
    store: Store
    storage: Storage


def make_metrics(source: Source | None) -> Metrics | NoMetrics:
    return Metrics(source) if CollectorRegistry is not None else NoMetrics()


class NoMetrics:
    """Where prometheus_client is not installed: every hook does nothing, and /metrics says why (503)."""

    def created(self, pool: str, seconds: float | None, ok: bool = True) -> None: ...
    def hibernated(self, pool: str) -> None: ...
    def resumed(self, pool: str, seconds: float) -> None: ...
    def call(self, operation: str, status: int, seconds: float, *, pool: str | None, outcome: str | None) -> None: ...

    def render(self) -> bytes:
        raise ApiError(503, "metrics are not available: the runtime's Python has no prometheus_client (the infra "
                            "image installs python3-prometheus-client)")


class Metrics:
    def __init__(self, source: Source | None):  # None: the app rendered for its API document only
        self.source = source
        self.registry = CollectorRegistry(auto_describe=True)
        self.claims = Counter(f"{PREFIX}_claims", "Claims answered, by pool and outcome ('bound': a sandbox was "
                              "bound; 'existing': the session had one; 'refused': an error).",
                              ["pool", "outcome"], registry=self.registry)
        self.claim_seconds = Histogram(f"{PREFIX}_claim_seconds", "Time to answer a claim that bound a sandbox.",
                                       ["pool"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.execs = Counter(f"{PREFIX}_execs", "Execs answered, by pool and outcome ('ok', 'timed_out', "
                             "'error').", ["pool", "outcome"], registry=self.registry)
        self.errors = Counter(f"{PREFIX}_errors", "Error answers, by kind and operation.", ["kind", "operation"],
                              registry=self.registry)
        self.creations = Counter(f"{PREFIX}_ondemand_creations", "Sandboxes created at claim time, by pool and "
                                 "outcome.", ["pool", "outcome"], registry=self.registry)
        self.creation_seconds = Histogram(f"{PREFIX}_ondemand_creation_seconds", "Time to create and start an "
                                          "on-demand sandbox.", ["pool"], buckets=LATENCY_BUCKETS,
                                          registry=self.registry)
        self.hibernations = Counter(f"{PREFIX}_hibernations", "Sessions hibernated, by pool.", ["pool"],
                                    registry=self.registry)
        self.resume_seconds = Histogram(f"{PREFIX}_resume_seconds", "Time to bring a hibernated session back.",
                                        ["pool"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_StateCollector(self))

    # Hooks for the runtime's own operations

    def created(self, pool: str, seconds: float | None, ok: bool = True) -> None:
        """An on-demand sandbox was created (its time to ready), or its creation failed."""
        self.creations.labels(pool, "ok" if ok else "failed").inc()
        if ok and seconds is not None:
            self.creation_seconds.labels(pool).observe(seconds)

    def hibernated(self, pool: str) -> None:
        self.hibernations.labels(pool).inc()

    def resumed(self, pool: str, seconds: float) -> None:
        self.resume_seconds.labels(pool).observe(seconds)

    # What the app records of each call

    def call(self, operation: str, status: int, seconds: float, *, pool: str | None, outcome: str | None) -> None:
        if pool is not None and (self.source is None or pool not in self.source.live.config.pools):
            pool = UNDECLARED  # label values only from the configuration: a bounded set of series
        if operation == "claim" and pool is not None:
            label = "refused" if status >= 400 else "bound" if status == 201 else "existing"
            self.claims.labels(pool, label).inc()
            if status == 201:
                self.claim_seconds.labels(pool).observe(seconds)
        if operation == "exec" and pool is not None:
            self.execs.labels(pool, "error" if status >= 400 else outcome or "ok").inc()
        if status >= 400:
            self.errors.labels(error_kind(status), operation).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector:
    """Read at each scrape: sandboxes by pool and status (every declared status, zeros included, so a panel's
    series exists before its first sandbox reaches it) and each pool's snapshots."""

    STATUSES = ("idle", "bound", "paused", "resetting", "unhealthy", "quarantined", "expired")

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def describe(self) -> list:
        return []  # collected only at a scrape, never at registration (the store may not be there yet)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        source = self.metrics.source
        sandboxes = GaugeMetricFamily(f"{PREFIX}_sandboxes", "Sandboxes of each pool on this host, by status.",
                                      labels=["pool", "status"])
        snapshots = GaugeMetricFamily(f"{PREFIX}_snapshots", "Snapshots kept per pool on this host.",
                                      labels=["pool"])
        snapshot_bytes = GaugeMetricFamily(f"{PREFIX}_snapshot_bytes", "Bytes the pool's snapshots take.",
                                           labels=["pool"])
        hibernated_bytes = GaugeMetricFamily(f"{PREFIX}_hibernated_bytes", "Bytes the pool's hibernated sessions' "
                                             "copies take (counted with its snapshots against snapshot_storage).",
                                             labels=["pool"])
        if source is not None:
            counts: dict[tuple[str, str], int] = {}
            pools = source.live.config.pools
            for pool in pools:
                for status in self.STATUSES:
                    counts[(pool, status)] = 0
            for row in source.store.sandboxes():
                counts[(row.pool, row.status)] = counts.get((row.pool, row.status), 0) + 1
            for (pool, status), count in sorted(counts.items()):
                sandboxes.add_metric([pool, status], count)
            for pool in pools:
                snaps = source.store.snapshots(pool=pool)
                snapshots.add_metric([pool], len(snaps))
                snapshot_bytes.add_metric([pool], sum(s.size for s in snaps))
                hibernated_bytes.add_metric([pool], source.storage.hibernated_bytes(pool))
        yield sandboxes
        yield snapshots
        yield snapshot_bytes
        yield hibernated_bytes

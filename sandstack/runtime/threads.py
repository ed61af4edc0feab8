"""How many requests the runtime serves at once.

Every endpoint but an upload is a plain function FastAPI runs in a worker thread of anyio's pool, 40 threads by
default: 40 slow calls (on-demand creations waiting for readiness, long execs) held every thread while warm claims,
which take milliseconds, queued behind them in the event loop (issue 22's 200 concurrent sessions).
"""

from __future__ import annotations

WORKER_THREADS = 256  # a waiting thread costs the runtime (256 MiB) a few KiB of memory


def widen_threads() -> None:
    """Called in the event loop at the app's start (the pool's limit is the loop's)."""
    import anyio.to_thread

    anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS

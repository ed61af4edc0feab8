"""The audit log: one JSON line per API call (time, who, session, sandbox, operation, outcome), in a file on
the state volume rotated by size, and readable back for `GET /v1/audit`."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from logging.handlers import RotatingFileHandler
from pathlib import Path

log = logging.getLogger("sandstack.runtime")
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5


class AuditLog:
    def __init__(self, path: Path, max_bytes: int = MAX_BYTES, backups: int = BACKUPS):
        self.path = path
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        # A logger of its own (not propagated): audit lines never mix with the service's diagnostics.
        self._logger = logging.getLogger(f"sandstack.audit.{path}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        for handler in list(self._logger.handlers):
            self._logger.removeHandler(handler)
            handler.close()
        self._handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger.addHandler(self._handler)
        self._lock = threading.Lock()

    def record(self, *, who: str, operation: str, outcome: str, status: int, session: str | None = None,
               sandbox: str | None = None, scope: str | None = None, secrets: list[str] | None = None,
               ms: float | None = None) -> None:
        """`scope`: the token's scope ('host', or a scoped token's name; never the token); `secrets`: the names
        of the run-scoped credentials a claim gave (never their values); `ms`: from the request's arrival at the
        application to its answer's start (a streamed body goes on after)."""
        line = {"time": round(time.time(), 3), "who": who, "session": session, "sandbox": sandbox,
                "operation": operation, "status": status, "outcome": outcome, "scope": scope, "secrets": secrets,
                "ms": None if ms is None else round(ms, 1)}
        with self._lock:
            # ensure_ascii (json's default, stated because it matters): any str, a lone surrogate included,
            # is written as an escape, so every line is ASCII and reads back as it was.
            self._logger.info(json.dumps(line, sort_keys=True, ensure_ascii=True))

    def tail(self, limit: int) -> list[dict[str, object]]:
        """The newest `limit` lines, oldest first, across the current file and its rotated backups."""
        records: deque[dict[str, object]] = deque(maxlen=limit)
        with self._lock:
            self._handler.flush()
            files = [self.path.with_name(f"{self.path.name}.{n}") for n in range(self.backups, 0, -1)] + [self.path]
            for file in files:
                if file.exists():
                    # errors="replace": a damaged byte costs its line, never the whole call.
                    with open(file, encoding="utf-8", errors="replace") as f:
                        for number, line in enumerate(f, 1):
                            record = _record(line)
                            if record is not None:
                                records.append(record)
                            elif line.strip():
                                log.warning("audit: %s:%d is not an audit line; left out", file, number)
        return list(records)

    def close(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()


FIELDS = {"time": (int, float), "who": str, "session": (str, type(None)), "sandbox": (str, type(None)),
          "operation": str, "status": int, "outcome": str}
# Added later: a line written before them reads back with None.
OPTIONAL = {"scope": (str, type(None)), "secrets": (list, type(None)), "ms": (int, float, type(None))}


def _record(line: str) -> dict[str, object] | None:
    """The audit record on `line`, or None when it is not one (a torn write, an edit by hand)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or any(not isinstance(record.get(k, ...), t) for k, t in FIELDS.items()):
        return None
    if any(not isinstance(record.get(k), t) for k, t in OPTIONAL.items()):
        return None
    return {key: record.get(key) for key in (*FIELDS, *OPTIONAL)}

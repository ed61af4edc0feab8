"""A process's stdin written without holding the request (`POST .../processes/{id}/stdin`).

A write to a process that never read held the request, and a server thread, for 30 s before it answered 504. Now a
write answers at once: what the process's stdin takes now (its pipe, Docker's stream) is written, and the rest of
that one write is held by the runtime and written by a thread of its own as the process reads. The answer says how
much is held (`stdin_pending`); a write while any is held is 409 and takes nothing, so writes keep their order and
no request ever waits on the process. Each process holds at most one write's rest (a write is at most 1 MiB), and the
runtime at most HELD_MAX bytes for all its processes: a write that could pass it is 409 before a byte is written.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sandstack.runtime.backend import StdinClosed
from sandstack.runtime.errors import conflict

log = logging.getLogger("sandstack.runtime")
HELD_MAX = 16 * 1024 * 1024  # bytes of stdin the runtime holds for all its processes at once
DRAIN_STEP = 0.5  # seconds the holding thread waits on the process at a time (then looks whether it ended)


class StdinWriter:
    def __init__(self, limit: int = HELD_MAX):
        self._lock = threading.Lock()
        self.limit, self.held = limit, 0

    def write(self, proc: Any, data: bytes, close: bool) -> None:
        """`data` to `proc`'s stdin (a processes.Process running with stdin open), then EOF if `close`; raises
        StdinClosed, or 409 when a write's rest is still held."""
        with self._lock:
            if proc.held:
                raise conflict(f"process {proc.id!r} has not read the last {len(proc.held)} bytes written to its stdin "
                               f"yet; nothing of these {len(data)} bytes was taken: write again when its "
                               "`stdin_pending` is 0", process=proc.id, pending=len(proc.held))
            if self.held + len(data) > self.limit:
                raise conflict(f"the runtime holds {self.held} bytes of stdin its processes have not read yet (at "
                               f"most {self.limit}); nothing of these {len(data)} bytes was taken: write again "
                               "later", process=proc.id, pending=0)
            taken = proc.handle.write(data, 0) if data else 0
            if taken < len(data):
                proc.held, proc.close_held = memoryview(data)[taken:], close
                self.held += len(proc.held)
                threading.Thread(target=self._drain, args=(proc,), daemon=True,
                                 name=f"sandstack-stdin-{proc.id}").start()
            elif close:
                proc.handle.close_stdin()
        if close:
            proc.stdin_open = False

    def _drain(self, proc: Any) -> None:
        """Writes what `write` held as the process reads it, until it is all written or the process has ended."""
        try:
            while proc.held and not proc.done.is_set():
                taken = proc.handle.write(proc.held, DRAIN_STEP)
                with self._lock:
                    proc.held = proc.held[taken:]
                    self.held -= taken
            if not proc.held and proc.close_held:
                proc.handle.close_stdin()
        except StdinClosed:
            pass  # it ended, or closed its stdin: what is left goes nowhere
        except Exception:  # noqa: BLE001 - the held bytes must be let go whatever happened
            log.exception("writing the held stdin of process %s failed", proc.id)
        finally:
            with self._lock:
                self.held -= len(proc.held)
                proc.held = memoryview(b"")

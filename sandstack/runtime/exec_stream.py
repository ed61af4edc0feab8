"""One exec's stdout pulled by whoever answers with it (a download's response iterates it): no thread between the
process's output and the HTTP answer on the Docker backend (sandstack.runtime.docker_stream), so a file's bytes
take one receive and one hand-over per MiB instead of a pipe's write and read per Docker frame.

`PipedStream` is the fallback for a backend with only `exec` (the tests' fake): its exec runs in a thread writing
into a pipe, read in full steps, as downloads did before.
"""

from __future__ import annotations

import fcntl
import os
import threading

from sandstack.runtime.backend import ExecStream, SandboxBackend

STEP = 1024 * 1024  # bytes of stdout per read at most: each is a hop through the server's thread pool
PIPE = 1024 * 1024  # the fallback's pipe buffer (Linux's default 64 KiB makes each step small: many hops)


class PipedStream(ExecStream):
    def __init__(self, backend: SandboxBackend, name: str, argv: list[str], *, workdir: str,
                 env: dict[str, str] | None, timeout: float | None):
        super().__init__()
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE)
        except OSError:  # past the system's pipe-max-size: the default buffer works, in smaller steps
            pass
        self._reader, writer = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb", buffering=0)
        self._done: dict[str, object] = {}

        def produce() -> None:
            try:
                self._done["status"] = backend.exec(name, argv, workdir=workdir, env=env, stdout=writer,
                                                    stderr=self.stderr, timeout=timeout)
            except BaseException as error:  # handed to the reading side
                self._done["error"] = error
            finally:
                writer.close()

        self._thread = threading.Thread(target=produce, name=f"sandstack-stream-{name}", daemon=True)
        self._thread.start()

    def read(self) -> bytes:
        # Full steps (read waits for STEP bytes or the end): fewer hops, and fewer, larger sends.
        return self._reader.read(STEP)

    def wait(self) -> int | None:
        self._thread.join()
        if "error" in self._done:
            raise self._done["error"]  # type: ignore[misc]
        return self._done["status"].exit_code  # type: ignore[union-attr]

    def close(self) -> None:
        self._reader.close()  # an exec still writing gets a broken pipe
        self._thread.join()

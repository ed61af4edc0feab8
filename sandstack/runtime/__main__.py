"""`python -m sandstack.runtime`: serve one host's runtime.

Reads its configuration from the set its configuration volume's `want` names (SANDSTACK_CONFIG_DIR; new sets are
taken in place: sandstack.runtime.reload), else from the file named by SANDSTACK_RUNTIME_CONFIG; its bearer token from
SANDSTACK_RUNTIME_TOKEN and keeps its state under SANDSTACK_RUNTIME_STATE (default
/var/lib/sandstack-runtime); talks to the host's daemon through DOCKER_HOST or the default socket.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from sandstack.plan.runtime import (
    AUDIT_FILE,
    DEFAULT_STATE_DIR,
    ENV_CONFIG,
    ENV_CONFIG_DIR,
    ENV_SSH_HOST_KEY,
    ENV_STATE_DIR,
    ENV_TOKEN,
    RuntimeConfig,
)
from sandstack.runtime.reload import POLL_SECONDS, ConfigSets, initial
from sandstack.spec.contract import WAKE_SOCKET

if TYPE_CHECKING:
    from fastapi import FastAPI

    from sandstack.runtime.service import Runtime

MIN_TOKEN = 16
# Seconds a thread that wants the GIL waits before the one running Python is made to give it up (CPython's default is
# 5 ms). The event loop and the request threads hand each call over several times; while another thread runs Python
# without a pause (a monitor pass over every sandbox, a JSON document being built), each hand-over waited up to the
# whole interval: a warm claim that takes 2 ms took 30-75 ms now and then at 200 sessions.
SWITCH_INTERVAL = 0.001


@dataclass(frozen=True)
class Start:
    config: RuntimeConfig
    digest: str | None  # the configuration set's; None: the configuration file's
    token: str
    state_dir: Path
    config_dir: Path | None  # the configuration volume, watched for new sets (sandstack.runtime.reload)


def load(environ: dict[str, str], wait: Callable[[float], object] = time.sleep) -> Start:
    """The config (the set `want` names in the configuration volume, else the file ENV_CONFIG names), token and
    state dir from the environment; ValueError names what is missing or wrong. With a configuration volume and no
    configuration file (or an empty one: the entrypoint writes what the environment holds), it waits for the first
    set: at a first deployment the runtime starts before its reload container delivers one (that container waits for
    the service), as the ingress waits for its first Caddyfile."""
    config_dir = Path(environ[ENV_CONFIG_DIR]) if environ.get(ENV_CONFIG_DIR) else None
    wanted = initial(config_dir)
    if wanted is None and config_dir is not None and not _has_file(environ.get(ENV_CONFIG)):
        print(f"sandstack runtime: waiting for the first configuration set in {config_dir}", file=sys.stderr)
        while (wanted := initial(config_dir)) is None:
            wait(POLL_SECONDS)
    if wanted is not None:
        config, digest = wanted.config, wanted.digest
    else:
        path = environ.get(ENV_CONFIG)
        if not path:
            raise ValueError(f"{ENV_CONFIG} is not set: it names the runtime's JSON configuration file (or a "
                             f"configuration set in {ENV_CONFIG_DIR})")
        try:
            config, digest = RuntimeConfig.from_json(Path(path).read_text(encoding="utf-8")), None
        except OSError as error:
            raise ValueError(f"{ENV_CONFIG}={path}: {error.strerror}") from error
    token = environ.get(ENV_TOKEN, "")
    if len(token) < MIN_TOKEN:
        raise ValueError(f"{ENV_TOKEN} must hold a token of at least {MIN_TOKEN} characters")
    return Start(config, digest, token, Path(environ.get(ENV_STATE_DIR) or DEFAULT_STATE_DIR), config_dir)


def _has_file(path: str | None) -> bool:
    try:
        return bool(path) and Path(path).stat().st_size > 0
    except OSError:
        return False


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        start = load(dict(os.environ))
    except ValueError as error:  # a set `want` names that is not valid too (Refused): nothing to serve with
        print(f"sandstack runtime: {error}", file=sys.stderr)
        return 2
    config, token, state_dir = start.config, start.token, start.state_dir
    import uvicorn

    from sandstack.runtime.app import create_app
    from sandstack.runtime.audit import AuditLog
    from sandstack.runtime.docker_backend import DockerBackend
    from sandstack.runtime.service import Runtime

    from sandstack.runtime.tokens import Tokens

    try:
        tokens = Tokens.from_environment(token, config, os.environ)
    except ValueError as error:  # names the scope and its variable, never a token
        print(f"sandstack runtime: {error}", file=sys.stderr)
        return 2
    if config.snapshot_store is not None:  # its secrets given, or no start (names the variable, never a value)
        from sandstack.runtime.snapstore import registry_store

        try:
            registry_store(config.snapshot_store, os.environ)
        except ValueError as error:
            print(f"sandstack runtime: snapshot store: {error}", file=sys.stderr)
            return 2
    runtime = Runtime(config, DockerBackend(), state_dir, digest=start.digest, environ=dict(os.environ))
    if start.config_dir is not None and start.digest is not None:
        ConfigSets(start.config_dir).report(start.digest)  # in force again after a restart: a reload waiting sees it
    environ = dict(os.environ)
    app = create_app(runtime, token=token, audit=AuditLog(state_dir / AUDIT_FILE), tokens=tokens,
                     config_dir=start.config_dir,
                     tokens_for=lambda new: Tokens.from_environment(token, new, environ),
                     # A set with another address or port to serve on: uvicorn stops on SIGTERM as at any stop
                     # (bound on-demand sandboxes hibernate), Docker's `always` policy starts the container again,
                     # and the new process serves what `want` names (docs/design/runtime.md, "Live configuration").
                     restart=lambda digest: os.kill(os.getpid(), signal.SIGTERM))
    from sandstack.runtime.listen import sockets

    wake_socket = Path(start.config_dir) / WAKE_SOCKET if start.config_dir is not None else None
    try:  # its own address, and the socket the host's ingress reaches it by (in its configuration volume)
        listening = sockets(config.listen, config.port, wake_socket)
    except OSError as error:
        print(f"sandstack runtime: cannot listen on port {config.port} or at {wake_socket}: {error.strerror}",
              file=sys.stderr)
        return 2
    if config.ssh_port is not None:  # SSH and SFTP into sessions' sandboxes (docs/design/ssh.md)
        try:
            start_ssh(runtime, app, config, os.environ)
        except (ValueError, OSError) as error:  # names the variable or the port, never the key
            print(f"sandstack runtime: SSH: {error}", file=sys.stderr)
            return 2
    sys.setswitchinterval(SWITCH_INTERVAL)
    # One process: the SQLite lock and the monitor thread assume a single runtime per host.
    from sandstack.runtime.connections import bounded_protocol

    # Request heads within a deadline, connections per source bounded (uvicorn bounds neither). No access log: the
    # audit log has a line for every call already, and uvicorn's line per request cost the claim path a log record
    # here and a JSON log line in Docker's log driver (docs/design/runtime.md, "Claims under a burst").
    server = uvicorn.Server(uvicorn.Config(app, workers=1, log_level="info", server_header=False, access_log=False,
                                           http=bounded_protocol()))
    server.run(sockets=listening)
    return 0


def start_ssh(runtime: Runtime, app: FastAPI, config: RuntimeConfig, environ: Mapping[str, str]) -> None:
    """The SSH endpoint on the API's own address (its exposure), its host key from the environment."""
    from sandstack.runtime.ssh import SshEndpoint

    host_key = environ.get(ENV_SSH_HOST_KEY, "")
    if not host_key.strip():
        raise ValueError(f"{ENV_SSH_HOST_KEY} must hold the SSH host key (runtime.ssh.host_key's secret)")
    assert config.ssh_port is not None
    SshEndpoint(runtime, app.state.audit, host_key, [config.listen], config.ssh_port).start()


if __name__ == "__main__":
    sys.exit(main())

"""The runtime's backend on the host's Docker daemon, through the Docker SDK's low-level client.

Each operation is one or two Engine API calls: inspect (state), exec create/start/inspect (processes, files,
snapshots), stats with one_shot (CPU), pause, unpause, restart, stop. Exec streams are read from the
attached socket directly so that stdin can be sent and closed, output capped as it arrives, and a deadline
kept (the SDK's own reader waits without a timeout).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, BinaryIO, Iterator

import docker
import requests

from sandstack.runtime.backend import (
    BackendError,
    ContainerState,
    DaemonUnavailable,
    ExecStatus,
    SandboxBackend,
    SandboxGone,
    SandboxNotRunning,
    Sink,
    WorkspaceReset,
)
from sandstack.plan.recipe import LABEL_RECIPE
from sandstack.runtime import rootfs
from sandstack.runtime.container_states import ContainerStates
from sandstack.runtime.docker_stream import DockerStream
from sandstack.runtime.docker_exec import (
    INSPECT_BACKOFF,
    STDERR,
    STDOUT,
    DockerHandle,
    copy_frames,
    docker_errors,
    shut,
)
from sandstack.runtime.readiness import Probe, probe_of
from sandstack.runtime.scripts import CLEAN, SET_PROFILE

SEND = 1024 * 1024  # bytes of stdin read and sent at a time (an upload: fewer, larger sends)
INSPECT_WAIT = 1.0  # seconds an ended exec's stream waits for its exit code at most (then it is reported as it is)
API_TIMEOUT = 30  # seconds for every call but a running exec's stream (which has its own deadline)
STOP_GRACE = 10  # seconds Docker waits after SIGTERM before SIGKILL on restart and stop
CLEAN_TIMEOUT = 300  # seconds the throwaway container that empties a disk workspace may take
CLEAN_MOUNT = "/sandstack-reset"  # where that container mounts the workspace (not its path: no copy from the image)
# What emptying a workspace needs beyond root without capabilities: DAC_OVERRIDE passes a session's
# `chmod 555`/`000`, FOWNER removes another user's file from the sticky root. Nothing else: no network, a
# read-only root, no new privileges.
CLEAN_CAPABILITIES = ["DAC_OVERRIDE", "FOWNER"]


class DockerBackend(SandboxBackend):
    def __init__(self, base_url: str | None = None):
        # Connected on first use: a runtime started while the daemon is down serves 503s, not a crash.
        self._base_url = base_url
        self._api: docker.APIClient | None = None
        self._lock = threading.Lock()
        # Each container's state from its last inspect, until Docker's event stream reports a change of it.
        self.states = ContainerStates(self._inspect_state)
        self._events: threading.Thread | None = None
        self._stop = threading.Event()
        self.provisioner = DockerProvisioner(self)  # what the on-demand places create and remove with

    @property
    def api(self) -> docker.APIClient:
        with self._lock:
            if self._api is None:
                with docker_errors("-"):
                    if self._base_url:
                        self._api = docker.APIClient(base_url=self._base_url, version="auto", timeout=API_TIMEOUT)
                    else:
                        self._api = docker.from_env(timeout=API_TIMEOUT).api
            return self._api

    def state(self, name: str) -> ContainerState:
        if self._events is None:
            self._follow_events()
        return self.states.get(name)

    def _follow_events(self) -> None:
        with self._lock:
            if self._events is None:
                self._events = threading.Thread(target=self.states.follow, args=(self._subscribe, self._stop),
                                                name="sandstack-container-events", daemon=True)
                self._events.start()

    def reconcile_states(self) -> None:
        self.states.reconcile(self._listed)

    def _listed(self) -> dict[str, tuple[str, str | None]]:
        """Every container of the daemon, name → (status, Id): one call, a few hundred bytes each."""
        with docker_errors("-"):
            found = self.api.containers(all=True)
        return {name.lstrip("/"): (container.get("State", ""), container.get("Id"))
                for container in found for name in container.get("Names") or ()}

    def _subscribe(self):
        # The SDK sends the request here and returns once Docker answered its head: the subscription is registered.
        return self.api.events(decode=True, filters={"type": "container"})

    @contextmanager
    def changing(self, name: str) -> Iterator[None]:
        """Around a change the runtime makes to a container's state: no answer kept from before it (or from an
        inspect under way meanwhile) is read after it, without waiting for Docker's event to arrive."""
        self.states.changed([name])
        try:
            yield
        finally:
            self.states.changed([name])

    def close(self) -> None:
        """Stops following Docker's events (the stream ends at its next event or when the daemon closes it)."""
        self._stop.set()

    def _inspect_state(self, name: str) -> ContainerState:
        try:
            with docker_errors(name):
                found = self.api.inspect_container(name)
        except SandboxGone:
            return ContainerState("missing")
        info = found["State"]
        return ContainerState(info["Status"], info.get("ExitCode"), info.get("StartedAt"), found.get("Id"),
                              found.get("Created"))

    def last_exit(self, name: str, since: str | None) -> int | None:
        # Docker's past events (the live stream is not needed): its `die` events since then, with their exit codes.
        start = docker_time(since) if since else time.time() - 3600
        with docker_errors(name):
            events = self.api.events(since=start, until=time.time(), decode=True,
                                     filters={"container": name, "event": "die"})
            codes = [((event.get("Actor") or {}).get("Attributes") or {}).get("exitCode") for event in events]
        codes = [int(code) for code in codes if isinstance(code, str) and code.isdigit()]
        return codes[-1] if codes else None

    def tmpfs_sizes(self, name: str) -> dict[str, int]:
        with docker_errors(name):
            tmpfs = (self.api.inspect_container(name).get("HostConfig") or {}).get("Tmpfs") or {}
        sizes = {path: tmpfs_size(options) for path, options in tmpfs.items()}
        return {path: size for path, size in sizes.items() if size is not None}

    def exec(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str] | None = None,
             stdin: BinaryIO | None = None, stdout: Sink, stderr: Sink,
             timeout: float | None = None) -> ExecStatus:
        started = time.monotonic()
        deadline = started + timeout if timeout else None
        with docker_errors(name):
            exec_id = self.api.exec_create(name, argv, stdin=stdin is not None, environment=env or None,
                                           workdir=workdir)["Id"]
            raw = self.api.exec_start(exec_id, socket=True)
        # The SDK hands back the socket's file wrapper on a Unix socket; send and half-close on the socket.
        sock: socket.socket = getattr(raw, "_sock", raw)
        try:
            if stdin is not None:
                _send(sock, stdin)
            finished = copy_frames(sock, {STDOUT: stdout, STDERR: stderr}, deadline)
        except OSError as error:
            raise DaemonUnavailable(f"the exec stream of {name!r} broke ({error})") from error
        finally:
            shut(sock)
        elapsed = lambda: int((time.monotonic() - started) * 1000)  # noqa: E731
        if not finished:
            return ExecStatus(None, elapsed())
        return ExecStatus(self._exit_code(name, exec_id), elapsed())

    def address(self, name: str) -> str | None:
        with docker_errors(name):
            networks = self.api.inspect_container(name)["NetworkSettings"].get("Networks") or {}
        # A sandbox is on its pool's network only.
        return next((n["IPAddress"] for n in networks.values() if n.get("IPAddress")), None)

    def set_profile(self, gateway: str, address: str, line: str | None, check: str = "") -> None:
        # As root in the gateway (no capabilities: it owns the configuration volume's top, squid's user does not),
        # so the helper, as squid's user, only reads what is written.
        with docker_errors(gateway):
            exec_id = self.api.exec_create(gateway, ["sh", "-c", SET_PROFILE, "sandstack-profile", address,
                                                     line or "", check], user="root")["Id"]
            out = self.api.exec_start(exec_id, stream=False, demux=False)
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            text = out.decode(errors="replace").strip() if isinstance(out, bytes) else str(out)
            raise BackendError(f"recording the network profile of {address} in {gateway!r} failed "
                               f"(exit {code}): {text[-300:]}")

    def _exit_code(self, name: str, exec_id: str) -> int | None:
        with docker_errors(name):
            # The stream ends when the process closes its output; its exit code is set a moment later: looked for
            # again after 2 ms, then twice as long each time (was every 20 ms: a file's read or write waited that).
            delay, longest = INSPECT_BACKOFF
            waited = 0.0
            while True:
                info = self.api.exec_inspect(exec_id)
                if not info["Running"] or waited >= INSPECT_WAIT:
                    return info["ExitCode"]
                time.sleep(delay)
                waited += delay
                delay = min(delay * 2, longest)

    def stream(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str] | None = None,
               timeout: float | None = None) -> DockerStream:
        """The exec's socket read by the caller's thread (sandstack.runtime.docker_stream): no thread of its own."""
        deadline = time.monotonic() + timeout if timeout else None
        with docker_errors(name):
            exec_id = self.api.exec_create(name, argv, stdin=False, environment=env or None, workdir=workdir)["Id"]
            raw = self.api.exec_start(exec_id, socket=True)
        # The SDK hands back the socket's file wrapper on a Unix socket: kept with the stream, which owns it now.
        return DockerStream(getattr(raw, "_sock", raw), name, deadline, lambda: self._exit_code(name, exec_id), raw)

    def spawn(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str], stdout: Sink, stderr: Sink,
              stdin: bool = False, tty: bool = False):
        return DockerHandle(self.api, name, argv, workdir=workdir, env=env, stdout=stdout, stderr=stderr,
                            stdin=stdin, tty=tty)

    def cpu_usage_ns(self, name: str) -> int | None:
        with docker_errors(name):
            # The Engine's one-shot stats (API 1.41+) answer at once; the SDK's `one_shot` argument is newer than
            # Debian's python3-docker (5.0), so the request is made with the SDK's own request helpers.
            url = self.api._url("/containers/{0}/stats", name)
            stats = self.api._result(self.api._get(url, params={"stream": False, "one-shot": True}), json=True)
        usage = (stats.get("cpu_stats") or {}).get("cpu_usage") or {}
        return usage.get("total_usage")

    def pause(self, name: str) -> None:
        with self.changing(name), docker_errors(name):
            self.api.pause(name)

    def unpause(self, name: str) -> None:
        with self.changing(name), docker_errors(name):
            self.api.unpause(name)

    def restart(self, name: str) -> None:
        with self.changing(name), docker_errors(name):
            self.api.restart(name, timeout=STOP_GRACE)

    def stop(self, name: str) -> None:
        with self.changing(name), docker_errors(name):
            self.api.stop(name, timeout=STOP_GRACE)

    def start(self, name: str) -> None:
        with self.changing(name), docker_errors(name):
            self.api.start(name)

    def clean_workspaces(self, name: str, workspaces: list[WorkspaceReset]) -> None:
        """A throwaway container per workspace, from the sandbox's own image (its `sh` and `rm`, which no session
        can change), as root with DAC_OVERRIDE and FOWNER only; then, for a seeded one, a container that is only
        created with the emptied volume at its path, so that Docker copies the image's content in as it did when
        the sandbox was created. Both are removed at once; they carry the sandbox's labels (role aside)."""
        with docker_errors(name):
            info = self.api.inspect_container(name)
        volumes = {m["Destination"]: m["Name"] for m in info["Mounts"] if m.get("Type") == "volume"}
        labels = {key: ("workspace-reset" if key.endswith(".role") else value)
                  for key, value in (info["Config"].get("Labels") or {}).items()}
        helper = f"{name}-reset"
        for workspace in workspaces:
            volume = volumes.get(workspace.path)
            if volume is None:
                raise BackendError(f"container {name!r} mounts no volume at {workspace.path!r}")
            with docker_errors(helper):
                self._remove(helper)  # a runtime that stopped mid-reset may have left it
                mount = docker.types.Mount(CLEAN_MOUNT, volume, type="volume", no_copy=True)
                config = self.api.create_host_config(
                    mounts=[mount], network_mode="none", cap_drop=["ALL"], cap_add=CLEAN_CAPABILITIES,
                    security_opt=["no-new-privileges:true"], read_only=True, mem_limit="64m", pids_limit=64)
                self.api.create_container(info["Image"], entrypoint=["sh", "-c", CLEAN, "sandstack-clean"],
                                          command=list(workspace.keep), user="0:0", working_dir=CLEAN_MOUNT,
                                          host_config=config, labels=labels, name=helper, network_disabled=True)
                try:
                    self.api.start(helper)
                    code = self.api.wait(helper, timeout=CLEAN_TIMEOUT)["StatusCode"]
                    err = self.api.logs(helper, stdout=False, stderr=True).decode(errors="replace").strip()
                except requests.exceptions.ReadTimeout:
                    code, err = None, f"did not finish in {CLEAN_TIMEOUT}s"
                finally:
                    self._remove(helper)
            if code != 0:
                raise BackendError(f"the disk workspace {workspace.path!r} of {name!r} could not be emptied "
                                   f"(exit {code}): {err[-500:] or 'no message'}")
            if workspace.seed:
                with docker_errors(helper):
                    config = self.api.create_host_config(
                        mounts=[docker.types.Mount(workspace.path, volume, type="volume")], network_mode="none")
                    try:
                        self.api.create_container(info["Image"], entrypoint=["true"], host_config=config,
                                                  labels=labels, name=helper, network_disabled=True)
                    finally:
                        self._remove(helper)

    def resize(self, name: str, update: dict[str, int]) -> None:
        api = self.api
        with docker_errors(name):
            # The Engine API's own body: the SDK's update_container takes neither NanoCpus nor PidsLimit.
            api._result(api._post_json(api._url("/containers/{0}/update", name), data=update), json=True)

    def reset_root(self, name: str) -> None:
        with docker_errors(name):
            info = self.api.inspect_container(name)
            labels = {key: ("root-reset" if key.endswith(".role") else value)
                      for key, value in (info["Config"].get("Labels") or {}).items()}
            rootfs.reset_root(self.api, name, info, labels)

    def read_root(self, name: str, out: Sink) -> None:
        with docker_errors(name):
            info = self.api.inspect_container(name)
            rootfs.read_root(self.api, name, info, info["Config"].get("Labels") or {}, out)

    def write_root(self, name: str, tar: BinaryIO) -> None:
        with docker_errors(name):
            info = self.api.inspect_container(name)
            rootfs.write_root(self.api, name, info, info["Config"].get("Labels") or {}, tar, _send)

    def _remove(self, helper: str) -> None:
        try:
            self.api.remove_container(helper, force=True)
        except docker.errors.NotFound:
            pass


class DockerProvisioner:
    """What the on-demand places need from Docker (sandstack.runtime.ondemand's Provisioner), through the backend's
    connection and its error mapping."""

    def __init__(self, backend: DockerBackend):
        self.backend = backend

    def create(self, name: str, body: dict[str, Any]) -> None:
        api = self.backend.api
        with self.backend.changing(name), docker_errors(name):
            # The body as the plan wrote it, in the Engine API's own terms: no SDK translation in between.
            api._result(api._post_json(api._url("/containers/create"), data=body, params={"name": name}), json=True)
            api.start(name)

    def health(self, name: str) -> tuple[str, str | None]:
        with docker_errors(name):
            state = self.backend.api.inspect_container(name)["State"]
        return state["Status"], (state.get("Health") or {}).get("Status")

    def probe(self, name: str) -> Probe | None:
        with docker_errors(name):
            config = self.backend.api.inspect_container(name)["Config"]
        return probe_of(config.get("Healthcheck"), config.get("WorkingDir"))

    def remove(self, name: str) -> None:
        with self.backend.changing(name), docker_errors(name):
            try:
                self.backend.api.remove_container(name, force=True)
            except docker.errors.NotFound:
                pass

    def listed(self, labels: dict[str, str]) -> dict[str, str]:
        with docker_errors("-"):
            found = self.backend.api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]})
        return {c["Names"][0].lstrip("/"): (c.get("Labels") or {}).get(LABEL_RECIPE, "") for c in found}


def _send(sock: socket.socket, stdin: BinaryIO) -> None:
    """stdin to the process, then EOF; the daemon keeps streaming its output after the half-close."""
    sock.settimeout(API_TIMEOUT)
    try:
        for chunk in iter(lambda: stdin.read(SEND), b""):
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the process exited without reading all of it (a refused path): its status says why


UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def tmpfs_size(options: str) -> int | None:
    """The `size=` of a tmpfs's mount options (`rw,size=16m`, `size=16777216`), in bytes; None when it has none or
    gives it as a share of memory (`size=50%`)."""
    for option in options.split(","):
        key, _, value = option.strip().partition("=")
        if key == "size":
            number, unit = value.rstrip("kKmMgGtT"), value[len(value.rstrip("kKmMgGtT")):].lower()
            if number.isdigit() and unit in UNITS:
                return int(number) * UNITS[unit]
            return None
    return None


def docker_time(rfc3339: str) -> float:
    """Seconds since the epoch of a Docker timestamp (`2026-11-27T02:40:01.123456789Z`; nanoseconds cut)."""
    return datetime.fromisoformat(rfc3339[:26].rstrip("Z") + "+00:00").timestamp()

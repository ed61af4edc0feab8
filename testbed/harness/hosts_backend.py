"""`HostsBackend`: the engine harness over several daemons, one connection per pulumi-docker provider.

A stack with many hosts registers one `docker.Provider` per host (`host`, `sshOpts`, `caMaterial`/`certMaterial`/
`keyMaterial`); every resource names its host's provider. Like `pulumi up`, each resource is applied through the
daemon its provider reaches, by that provider's transport:
- `unix://…`: the socket;
- `tcp://…` with TLS material: HTTPS with the client certificate, the daemon's certificate verified against the CA
  (the PEM text goes to files only this process can read, removed at close, and never into a message);
- `ssh://user@host[:port]`: the ssh client with the provider's `ssh_opts`, forwarding the remote daemon's socket
  (the provider runs `docker system dial-stdio` over ssh per connection; both authenticate the same way: the
  key and known_hosts the options name, host keys checked).

The provider pings the daemon when it is configured (terraform-provider-docker `config.go`, "Error pinging Docker
server"): so does this backend, on each resource, and a host that does not answer fails the resources placed on
it with `HostUnreachable` naming the host and its provider, while resources on the other hosts are applied as usual
(as `pulumi up --continue-on-error`; without it Pulumi starts nothing new after the first failure). The run's error
then lists every unreachable host with how many of its resources were not applied (`run_error`).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import docker
import docker.tls
import pulumi

from testbed.harness.docker_backend import DockerBackend
from testbed.harness.teardown import remaining, sweep_session
from testbed.provider.mocks import HarnessError, UnsupportedResourceError
from testbed.provider.tables import MAPPINGS

TRANSPORT_FIELDS = frozenset({"host", "sshOpts", "caMaterial", "certMaterial", "keyMaterial"})
PING_TIMEOUT = 5
MIN_API = "1.24"


class HostUnreachable(HarnessError):
    """A provider's daemon does not answer (or refuses our credentials): names the host, never a secret."""


class _Connection:
    """How one provider reaches its daemon: the base URL and TLS config of a docker client, plus what keeps
    them working (the ssh forward, the TLS files)."""

    def __init__(self, endpoint: str, inputs: dict, workdir: Path):
        self.endpoint, self.workdir = endpoint, workdir
        self.tls: docker.tls.TLSConfig | None = None
        self.ssh: subprocess.Popen | None = None
        if endpoint.startswith("unix://"):
            self.base_url = endpoint
        elif endpoint.startswith("tcp://"):
            material = {part: inputs.get(f"{part}Material") for part in ("ca", "cert", "key")}
            if not all(material.values()):
                raise HostUnreachable(f"host {endpoint}: a tcp:// endpoint needs the provider's ca, cert and key "
                                      f"material (missing: {sorted(k for k, v in material.items() if not v)})")
            for part, text in material.items():
                path = workdir / f"{part}.pem"
                path.touch(mode=0o600)
                path.write_text(text)
            self.tls = docker.tls.TLSConfig(client_cert=(str(workdir / "cert.pem"), str(workdir / "key.pem")),
                                            ca_cert=str(workdir / "ca.pem"), verify=True)
            self.base_url = endpoint
        elif endpoint.startswith("ssh://"):
            opts = inputs.get("sshOpts") or []
            # Pulumi hands a provider its non-string config as JSON text.
            self.base_url = self._forward(endpoint, json.loads(opts) if isinstance(opts, str) else list(opts))
        else:
            raise UnsupportedResourceError(f"host {endpoint}: not a transport the harness maps")

    def _forward(self, endpoint: str, ssh_opts: list[str]) -> str:
        target = endpoint[len("ssh://"):]
        login, _, port = target.partition(":") if target.count(":") == 1 else (target, "", "")
        local = self.workdir / "docker.sock"
        self.ssh = subprocess.Popen(
            ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ConnectTimeout=5", *ssh_opts,
             *(["-p", port] if port else []), "-L", f"{local}:/var/run/docker.sock", login],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 15
        while not local.exists():
            if self.ssh.poll() is not None:
                said = [line for line in self.ssh.stderr.read().splitlines() if line.strip()]
                raise HostUnreachable(f"host {endpoint}: ssh failed ({said[-1] if said else f'exit {self.ssh.returncode}'})")
            if time.monotonic() > deadline:
                self.close()
                raise HostUnreachable(f"host {endpoint}: ssh did not connect within 15 s")
            time.sleep(0.05)
        return f"unix://{local}"

    def client(self, timeout: int) -> docker.APIClient:
        client = docker.APIClient(base_url=self.base_url, tls=self.tls or False, version=MIN_API, timeout=timeout)
        # Like the provider, trust only the host's CA: requests would otherwise take REQUESTS_CA_BUNDLE and proxies
        # from the environment. Then negotiate the version (what version="auto" does, but after that).
        client.trust_env = False
        client._version = client._retrieve_server_version()
        return client

    def alive(self) -> bool:
        return self.ssh is None or self.ssh.poll() is None

    def close(self) -> None:
        if self.ssh is not None and self.ssh.poll() is None:
            self.ssh.terminate()
            self.ssh.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


class HostsBackend(DockerBackend):
    """DockerBackend whose every operation goes to the daemon of the resource's provider."""

    def __init__(self, session_id: str, timeout: int = 300):  # noqa: super().__init__ would connect to one daemon
        self.session_id, self.timeout = session_id, timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self.providers: dict[str, dict] = {}
        self.mappings = MAPPINGS
        self.extra_types: dict = {}
        self.base_url = self.socket = ""
        self._root = Path(tempfile.mkdtemp(prefix="sandstack-providers-"))
        self._connections: dict[str, _Connection] = {}
        self._versions: dict[str, str] = {}
        self.unreachable: dict[str, list[str]] = {}  # this run: the message of each unreachable host -> its URNs

    # --- which daemon ------------------------------------------------------------------------------
    def provider_host(self, urn: str, provider_ref: str) -> str:
        with self._lock:
            inputs = self.providers.get(provider_ref) if provider_ref else {
                "host": pulumi.runtime.get_config("docker:host") or ""}
        if inputs is None:
            raise HarnessError(f"{urn}: unknown provider reference {provider_ref!r}")
        extra = sorted(set(inputs) - TRANSPORT_FIELDS - {"disableDockerDaemonCheck", "version"})
        if extra or not inputs.get("host"):
            raise UnsupportedResourceError(f"{urn}: provider {provider_ref or '(default)'} needs an explicit host and "
                                           f"only the transport fields {sorted(TRANSPORT_FIELDS)} (also sets {extra})")
        host = inputs["host"]
        try:
            self._use(host, inputs)
        except HostUnreachable as error:
            # The provider's logical name carries the spec's host name (`sandstack-<host>-provider`).
            name = provider_ref.split("::")[3] if provider_ref.count("::") >= 4 else None if provider_ref else "default"
            message = str(error).replace(f"host {host}:", f"host {host} (provider {name}):", 1) if name else str(error)
            with self._lock:
                self.unreachable.setdefault(message, []).append(urn)
            raise HostUnreachable(message) from None
        return host

    # --- one run -------------------------------------------------------------------------------------
    def begin_run(self) -> None:
        """A new `pulumi up`: which hosts are unreachable is found again."""
        self.unreachable = {}

    def run_error(self, error: BaseException) -> BaseException:
        """The run's error: every unreachable host, each with the count of its resources left as they were
        (the first failed registration alone would name one host, and only one resource of it)."""
        if not self.unreachable:
            return error
        parts = [f"{message} ({len(urns)} resource{'s' * (len(urns) != 1)} left as they were)"
                 for message, urns in sorted(self.unreachable.items())]
        return HostUnreachable(f"{len(parts)} host{'s' * (len(parts) != 1)} unreachable: " + "; ".join(parts))

    def _use(self, host: str, inputs: dict | None = None) -> None:
        """Points this thread at `host`'s daemon, connecting first if needed; fails when it does not answer."""
        with self._lock:
            connection = self._connections.get(host)
            if connection is not None and not connection.alive():
                connection.close()
                connection = None
            if connection is None:
                if inputs is None:
                    raise HostUnreachable(f"host {host}: no provider connection (was it registered in this run?)")
                workdir = self._root / secrets.token_hex(4)
                workdir.mkdir(mode=0o700)
                connection = self._connections[host] = _Connection(host, inputs, workdir)
        self._local.host = host
        try:
            client = self.api
            client.ping()
        except Exception as error:  # noqa: BLE001 -- every transport's failure becomes one message
            getattr(self._local, "clients", {}).pop(host, None)
            raise HostUnreachable(f"host {host}: the Docker daemon does not answer ({_reason(error)})") from None
        self._versions.setdefault(host, client.api_version)

    @property
    def api(self) -> docker.APIClient:
        clients = getattr(self._local, "clients", None)
        if clients is None:
            clients = self._local.clients = {}
        host = getattr(self._local, "host", None)
        if host is None:
            raise HarnessError("HostsBackend: no host selected for this thread")
        if host not in clients:
            clients[host] = self._connections[host].client(min(self.timeout, 300))
            clients[host].timeout = PING_TIMEOUT
            clients[host].ping()
            clients[host].timeout = self.timeout
        return clients[host]

    @property
    def api_version(self) -> str:
        return self._versions.get(getattr(self._local, "host", ""), "1.41")

    def delete(self, entry) -> str:
        self._use(entry.provider_host)
        return super().delete(entry)

    # --- every host ---------------------------------------------------------------------------------
    def hosts(self) -> list[str]:
        return sorted(self._connections)

    def sweep(self, session_id: str) -> dict[str, list[str]]:
        """The label sweep on every host still answering."""
        swept: dict[str, list[str]] = {}
        for host in self.hosts():
            try:
                self._use(host)
            except HostUnreachable:
                continue
            for kind, names in sweep_session(self.api, session_id).items():
                swept.setdefault(kind, []).extend(f"{host}: {name}" for name in names)
        return swept

    def remaining(self, session_id: str) -> dict[str, list[str]]:
        left: dict[str, list[str]] = {}
        for host in self.hosts():
            self._use(host)
            for kind, names in remaining(self.api, session_id).items():
                left.setdefault(kind, []).extend(f"{host}: {name}" for name in names)
        return left

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        shutil.rmtree(self._root, ignore_errors=True)


def _reason(error: BaseException) -> str:
    """A transport error in one line, without what it may carry beyond the reason (never PEM text: the ssl and
    requests errors name files and addresses, and we cut at the first line)."""
    text = str(error).splitlines()[0] if str(error) else ""
    for marker in ("CERTIFICATE_VERIFY_FAILED", "certificate unknown", "bad certificate", "unknown ca",
                   "Connection refused", "timed out", "No such file"):
        if marker.lower() in str(error).lower():
            return f"{type(error).__name__}: {marker}"
    return f"{type(error).__name__}: {text[:160]}"

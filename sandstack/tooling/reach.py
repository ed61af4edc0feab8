"""`--check-hosts` of `sandstack preview` and `diff`: each host's Docker daemon pinged through its declared transport.

Preview and diff are offline: they say what `pulumi up` would make, not whether it can. With `--check-hosts` they
also ask each host's daemon `GET /_ping` the way its pulumi-docker provider reaches it, with a short timeout:
- `unix://PATH`: the socket;
- `ssh://user@host[:port]`: `ssh` with the host's `ssh_opts` (plus BatchMode: a check never prompts) running
  `docker system dial-stdio` on the host, as the provider does;
- `tcp://host:port`: mutual TLS with the host's CA, certificate and key, read from the stack's config as
  `pulumi config --show-secrets --json` prints it (`--config FILE`); without it the host is reported unchecked.

An unreachable host is reported by name, transport, endpoint and an error class (the table below), never with a
secret: PEM text is only handed to the TLS library, and what a failure says is reduced to its class.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import subprocess
import tempfile
from dataclasses import dataclass

from sandstack.files import MIB, read_json
from sandstack.spec.models.hosts import Host

CONFIG_LIMIT = 4 * MIB  # a stack's config: keys, and TLS material in PEM
CONFIG_WHAT = "a config file (`pulumi config --show-secrets --json`)"

TIMEOUT = 5.0
REQUEST = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"

# error class -> what it means, for the report (docs/design/hosts.md lists them too).
CLASSES = {
    "no-socket": "no socket at that path",
    "permission-denied": "the socket exists but this user may not use it",
    "refused": "nothing listens at the address (the daemon is stopped)",
    "timeout": "no answer within the timeout (the machine is down or unreachable)",
    "no-route": "no route to the address",
    "connect-failed": "the connection failed",
    "unresolved": "the host name does not resolve",
    "ssh-auth-refused": "the host refused the ssh key",
    "ssh-host-key": "the host's key is not the one in known_hosts (or none is known)",
    "ssh-failed": "ssh failed",
    "daemon-down": "reached the machine, but its Docker daemon does not answer",
    "tls-server-untrusted": "the daemon's certificate is not signed by the declared CA (or not for this name)",
    "tls-client-refused": "the daemon refused the client certificate",
    "tls-material-invalid": "the TLS material in the config is not a usable PEM certificate and key",
    "tls-material-missing": "not checked: its TLS material is in the stack's secret config (pass --config)",
    "not-docker": "something answered that is not a Docker daemon",
}


@dataclass(frozen=True)
class Reach:
    host: str
    transport: str   # unix, ssh or tcp+tls
    endpoint: str
    error: str | None = None  # a key of CLASSES; None: the daemon answered

    def text(self) -> str:
        where = f"host {self.host} ({self.transport} {self.endpoint})"
        if self.error is None:
            return f"{where}: reachable"
        return f"{where}: unreachable: {self.error} ({CLASSES[self.error]})"


def load_config(path: str | None) -> dict[str, str]:
    """`pulumi config --show-secrets --json` (`{"project:key": {"value": ..., "secret": true}}`) as {key: value}."""
    if not path:
        return {}
    data = read_json(path, CONFIG_LIMIT, CONFIG_WHAT)  # a regular file, bounded: sandstack.files
    if not isinstance(data, dict):
        raise ValueError(f"{path}: $: expected an object of config keys, as `pulumi config --show-secrets --json` "
                         "writes it")
    return {key: entry.get("value") if isinstance(entry, dict) else entry for key, entry in data.items()}


def _config_value(config: dict[str, str], key: str) -> str | None:
    """`key` as a spec names it: `ns:name` exactly, a bare name in whichever namespace holds it (the project's)."""
    if key in config:
        return config[key]
    found = [value for name, value in config.items() if ":" not in key and name.rpartition(":")[2] == key]
    return found[0] if len(found) == 1 else None


def check_hosts(hosts: dict[str, Host], config: dict[str, str], timeout: float = TIMEOUT) -> list[Reach]:
    return [_check(name, host, config, timeout) for name, host in sorted(hosts.items())]


def _check(name: str, host: Host, config: dict[str, str], timeout: float) -> Reach:
    endpoint = host.endpoint
    scheme, _, rest = endpoint.partition("://")
    if scheme == "unix":
        return Reach(name, "unix", endpoint, _unix(rest, timeout))
    if scheme == "ssh":
        return Reach(name, "ssh", endpoint, _ssh(rest, list(host.ssh_opts), timeout))
    material = [_config_value(config, ref.secret) for ref in (host.tls.ca, host.tls.cert, host.tls.key)] \
        if host.tls else [None, None, None]
    if not all(material):
        return Reach(name, "tcp+tls", endpoint, "tls-material-missing")
    address, _, port = rest.rpartition(":")
    return Reach(name, "tcp+tls", endpoint, _tls(address, int(port), *material, timeout))


def _answer(data: bytes) -> str | None:
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    return None if status[1:2] == [b"200"] and body.strip() == b"OK" else "not-docker"


def _socket_error(error: OSError) -> str:
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(error, FileNotFoundError):
        return "no-socket"
    if isinstance(error, PermissionError):
        return "permission-denied"
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, socket.gaierror):
        return "unresolved"
    return "no-route" if getattr(error, "errno", None) in (errno.ENETUNREACH, errno.EHOSTUNREACH) else "connect-failed"


def _exchange(sock: socket.socket) -> bytes:
    sock.sendall(REQUEST)
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _unix(path: str, timeout: float) -> str | None:
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            return _answer(_exchange(sock))
    except OSError as error:
        return _socket_error(error)


def _ssh(rest: str, ssh_opts: list[str], timeout: float) -> str | None:
    login, _, port = rest.partition(":")
    cmd = ["ssh", *ssh_opts, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}",
           *(["-p", port] if port else []), "--", login, "docker", "system", "dial-stdio"]
    try:
        done = subprocess.run(cmd, input=REQUEST, capture_output=True, timeout=timeout * 2)
    except subprocess.TimeoutExpired:
        return "timeout"
    except FileNotFoundError:
        return "ssh-failed"  # no ssh client on this machine
    if done.stdout:
        return _answer(done.stdout)
    said = done.stderr.decode(errors="replace")
    for marker, error in (("Permission denied", "ssh-auth-refused"), ("Host key verification failed", "ssh-host-key"),
                          ("HOST IDENTIFICATION HAS CHANGED", "ssh-host-key"), ("Connection refused", "refused"),
                          ("timed out", "timeout"), ("No route to host", "no-route"),
                          ("Could not resolve hostname", "unresolved"), ("docker daemon", "daemon-down"),
                          ("docker.sock", "daemon-down")):
        if marker.lower() in said.lower():
            return error
    return "ssh-failed"


def _tls(address: str, port: int, ca: str, cert: str, key: str, timeout: float) -> str | None:
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca)
        # The TLS library takes a certificate and key only from files: a private directory, removed at once.
        with tempfile.TemporaryDirectory(prefix="sandstack-tls-") as directory:
            paths = [os.path.join(directory, name) for name in ("cert.pem", "key.pem")]
            for path, pem in zip(paths, (cert, key)):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                    out.write(pem)
            context.load_cert_chain(*paths)
    except (ssl.SSLError, ValueError):
        return "tls-material-invalid"
    try:
        with socket.create_connection((address, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=address) as sock:
                return _answer(_exchange(sock))
    except ssl.SSLCertVerificationError:
        return "tls-server-untrusted"
    except ssl.SSLError:
        return "tls-client-refused"  # an alert from the daemon: bad/unknown certificate, certificate required
    except ConnectionResetError:
        return "tls-client-refused"  # the daemon hung up on the handshake
    except OSError as error:
        return _socket_error(error)

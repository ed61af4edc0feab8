"""Test hosts that are real Docker hosts: extra `dockerd`s on this machine, each in its own namespaces.

    with TestHosts(["ssh", "tcp"]) as hosts:      # (module-scoped fixture `test_hosts` in tests/engine/hosts)
        hosts["ssh"].spec_host()                 # the spec's `hosts.<name>` entry: endpoint, ssh_opts / tls refs
        hosts.secrets                            # Pulumi secret config: the TLS hosts' PEM material
        hosts["tcp"].stop_daemon(); hosts["tcp"].start_daemon()   # a host lost and back

Each host is what a platform team's machine would be (docs/design/hosts.md), scaled down:
- its own network namespace (so its own iptables, bridges and routes), joined to this machine by a veth pair
  198.19.255.<4n+1> (here) <-> 198.19.255.<4n+2> (the host), a /30 of the benchmarking range (198.18.0.0/15: not
  private, so the stack's gateway and guard let an allow-all sandbox reach it, as they would the internet), and NO
  default route: nothing a sandbox sends can leave this machine, whatever the stack does;
- its own mount namespace with a private /run, so `/var/run/docker.sock` there is the host's own daemon (the
  runtime container binds it, and `docker system dial-stdio` over ssh uses it), not this machine's;
- its own --data-root, --exec-root and --pidfile under /var/lib/sandstack-hosts/<name> and its private /run;
- `ssh`: Debian's OpenSSH server in those namespaces, a generated host key and client key, and a known_hosts
  entry for exactly that key (StrictHostKeyChecking=yes: nothing is turned off);
- `tcp`: the daemon on the host's address, port 2376, with --tlsverify, a generated CA, server and client certificate; the
  client material goes to the spec only as secret references.

Everything is removed on exit: daemons, sshd, namespaces (their veths and iptables go with them), data roots.
The cgroup tree is this machine's, shared by every daemon (a real fleet has one per machine): see the docs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import docker

from testbed.waiting import wait_until

DATA = Path("/var/lib/sandstack-hosts")
# 198.19.255.<4n>/30 per host (n < 64): the test internet's range, where no route of this machine goes (tests/engine/
# net/lab.py and testbed/deploy.py take the rest of 198.18.0.0/15; docs there say why not a private range).
LINKS = ipaddress.IPv4Network("198.19.255.0/24")
TLS_PORT = 2376
SSH_PORT = 22
KINDS = ("unix", "ssh", "tcp")
# In the host's mount namespace, a private /run. (Not `ip netns exec`: it mounts a fresh /sys without the cgroup
# tree, which the daemon and the host guard need.)
SETUP_MOUNTS = "mount -t tmpfs -o mode=755 sandstack-host-run /run && mkdir -p /run/sshd && exec sleep infinity"


def _run(*cmd: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr.strip()[-800:]}")
    return result


@dataclass
class TestHost:
    """One extra Docker host: `kind` is how the stack reaches it (unix socket, ssh or tcp+TLS)."""

    name: str
    kind: str
    index: int
    holder: subprocess.Popen | None = None   # `sleep` owning the host's mount namespace (inside its netns)
    dockerd: subprocess.Popen | None = None
    sshd: subprocess.Popen | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    mount_ns: str = ""  # the mount namespace's identity (/proc/PID/ns/mnt), to find what runs in it

    # --- where things are --------------------------------------------------------------------------
    @property
    def netns(self) -> str:
        return f"sshost{self.index}"

    @property
    def veth(self) -> str:
        return f"sshv{self.index}"

    @property
    def address(self) -> str:
        return str(LINKS[4 * self.index + 2])

    @property
    def peer_address(self) -> str:
        """This machine's address on the host's link: the only place the host can reach."""
        return str(LINKS[4 * self.index + 1])

    @property
    def dir(self) -> Path:
        return DATA / self.name

    @property
    def admin_socket(self) -> Path:
        """The daemon's socket on this machine: how tests look at a host directly (never through the stack)."""
        return self.dir / "docker.sock"

    @property
    def endpoint(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.admin_socket}"
        if self.kind == "ssh":
            return f"ssh://root@{self.address}:{SSH_PORT}"
        return f"tcp://{self.address}:{TLS_PORT}"

    def ssh_opts(self, key: Path | None = None) -> list[str]:
        """The spec's `ssh_opts`: this host's client key and known_hosts, host keys checked."""
        return ["-i", str(key or self.dir / "client_key"), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.dir / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes"]

    def spec_host(self) -> dict:
        """The host's transport fields for a spec's `hosts.<name>`."""
        out: dict = {"endpoint": self.endpoint}
        if self.kind == "ssh":
            out["ssh_opts"] = self.ssh_opts()
        if self.kind == "tcp":
            out["tls"] = {part: {"secret": f"{self.name}Tls.{part}"} for part in ("ca", "cert", "key")}
        return out

    def client(self, timeout: int = 60) -> docker.DockerClient:
        return docker.DockerClient(base_url=f"unix://{self.admin_socket}", version="auto", timeout=timeout)

    # --- life ----------------------------------------------------------------------------------------
    def create(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "daemon.json").write_text("{}\n")
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        _run("ip", "addr", "add", f"{self.peer_address}/30", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        for cmd in (("ip", "link", "set", "lo", "up"), ("ip", "addr", "add", f"{self.address}/30", "dev", "eth0"),
                    ("ip", "link", "set", "eth0", "up")):
            _run("ip", "netns", "exec", self.netns, *cmd)
        # A private /run: the host's /var/run/docker.sock, its containerd and runc state are its own.
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "nsenter", f"--net=/run/netns/{self.netns}", "--",
             "sh", "-c", SETUP_MOUNTS],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda: self._holder_pid() is not None, timeout=10, what=f"{self.name}: its namespaces")
        self.mount_ns = os.readlink(f"/proc/{self._holder_pid()}/ns/mnt")
        if self.kind == "tcp":
            self.secrets = _tls_material(self.dir, self.name, self.address)
        if self.kind == "ssh":
            _ssh_material(self.dir, self.address)
        self.start_daemon()
        if self.kind == "ssh":
            self.sshd = self._enter("/usr/sbin/sshd", "-D", "-e", "-f", str(self.dir / "sshd_config"),
                                    log=self.dir / "sshd.log")
            wait_until(lambda: _listening(self.address, SSH_PORT), timeout=20, what=f"{self.name}: sshd listening")

    def _holder_pid(self) -> int | None:
        """The `sleep` inside the namespaces (unshare execs nsenter, which forks sh, which execs sleep)."""
        if self.holder is None or self.holder.poll() is not None:
            return None
        try:
            cmdline = Path(f"/proc/{self.holder.pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None
        return self.holder.pid if cmdline.startswith(b"sleep") else None

    def _enter(self, *cmd: str, log: Path) -> subprocess.Popen:
        """Starts `cmd` inside the host's network and mount namespaces."""
        pid = self._holder_pid()
        assert pid is not None, f"{self.name}: its namespaces are gone"
        with open(log, "ab") as out:
            return subprocess.Popen(["nsenter", "-t", str(pid), "--net", "--mount", "--", *cmd],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def start_daemon(self) -> None:
        listen = ["-H", "unix:///var/run/docker.sock", "-H", f"unix://{self.admin_socket}"]
        if self.kind == "tcp":
            listen += ["-H", f"tcp://{self.address}:{TLS_PORT}", "--tlsverify", f"--tlscacert={self.dir / 'ca.pem'}",
                       f"--tlscert={self.dir / 'server.pem'}", f"--tlskey={self.dir / 'server-key.pem'}"]
        self.dockerd = self._enter(
            "dockerd", f"--config-file={self.dir / 'daemon.json'}", f"--data-root={self.dir / 'data'}",
            "--exec-root=/run/docker", "--pidfile=/run/docker.pid", *listen, log=self.dir / "dockerd.log")

        def answers() -> bool:
            if self.dockerd.poll() is not None:
                raise RuntimeError(f"{self.name}: dockerd exited ({self.dockerd.returncode}):\n"
                                   + (self.dir / "dockerd.log").read_text()[-2000:])
            try:
                return self.client(timeout=5).ping()
            except Exception:  # noqa: BLE001 -- not up yet
                return False
        wait_until(answers, timeout=60, what=f"{self.name}: dockerd answering")

    def stop_daemon(self) -> None:
        """The host's daemon gone (its containers stop with it): what a lost host looks like to sandstack."""
        if self.dockerd is not None and self.dockerd.poll() is None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()
        self.dockerd = None

    def destroy(self) -> None:
        for proc in (self.sshd,):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
        self.stop_daemon()
        # Whatever still runs in the host's mount namespace (an ssh session a client left open, a shim) was started
        # by this host: it goes too, or it would keep the namespaces alive.
        for pid in _pids_in(self.mount_ns) if self.mount_ns else ():
            if pid != self._holder_pid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.holder is not None and self.holder.poll() is None:
            os.killpg(self.holder.pid, signal.SIGTERM)
            self.holder.wait(timeout=10)
        _run("ip", "netns", "del", self.netns, check=False)  # takes its veth end, bridges and iptables with it
        _run("ip", "link", "del", self.veth, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def _pids_in(mount_ns: str) -> list[int]:
    # A host whose namespace was never made private would name this machine's own: killing "its" processes would
    # then kill the machine's dockerd and everything else.
    if mount_ns == os.readlink("/proc/self/ns/mnt"):
        raise RuntimeError(f"refusing to end the processes of {mount_ns}: it is this machine's own mount namespace")
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "mnt") == mount_ns:
                    found.append(int(entry.name))
    return found


def _listening(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1).close()
        return True
    except OSError:
        return False


def _tls_material(directory: Path, name: str, address: str) -> dict[str, str]:
    """A CA, the daemon's certificate (for its address) and a client certificate; returns the client's PEMs
    keyed as the spec's secret references name them."""
    def ssl(*args: str) -> None:
        _run("openssl", *args, cwd=directory)
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-subj", f"/CN=sandstack test CA {name}", "-keyout", "ca-key.pem", "-out", "ca.pem")
    for who, subject, ext in (("server", f"/CN={address}", f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth"),
                              ("client", "/CN=sandstack", "extendedKeyUsage=clientAuth")):
        (directory / f"{who}.ext").write_text(ext + "\n")
        ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", subject,
            "-keyout", f"{who}-key.pem", "-out", f"{who}.csr")
        ssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.pem")
    for pem in directory.glob("*key.pem"):
        pem.chmod(0o600)
    return {f"{name}Tls.ca": (directory / "ca.pem").read_text(),
            f"{name}Tls.cert": (directory / "client.pem").read_text(),
            f"{name}Tls.key": (directory / "client-key.pem").read_text()}


def _ssh_material(directory: Path, address: str) -> None:
    """Host key, client key (authorized), known_hosts naming exactly that host key, sshd_config."""
    for key in ("host_key", "client_key", "wrong_key"):
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sandstack-test-{key}", "-f", str(directory / key))
    (directory / "authorized_keys").write_text((directory / "client_key.pub").read_text())
    host_pub = (directory / "host_key.pub").read_text().split()
    (directory / "known_hosts").write_text(f"{address} {host_pub[0]} {host_pub[1]}\n")
    (directory / "sshd_config").write_text(
        f"ListenAddress {address}:{SSH_PORT}\nHostKey {directory / 'host_key'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile none\n"
        "AllowStreamLocalForwarding local\nX11Forwarding no\n")


class TestHosts:
    """Several test hosts at once, with the test images loaded into each (`docker save | docker load`)."""

    def __init__(self, kinds: list[str], images_from: docker.DockerClient | None = None, first_index: int = 1):
        self.hosts = {kind: TestHost(kind, kind, first_index + i) for i, kind in enumerate(kinds)}
        self.images_from = images_from

    def __getitem__(self, name: str) -> TestHost:
        return self.hosts[name]

    @property
    def secrets(self) -> dict[str, str]:
        return {key: value for host in self.hosts.values() for key, value in host.secrets.items()}

    def __enter__(self) -> "TestHosts":
        try:
            for host in self.hosts.values():
                host.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load_images(self, tags: list[str], source: docker.DockerClient) -> None:
        """Copies locally built images to every host (`docker save | docker load`): never pulled."""
        for tag in tags:
            with tempfile.TemporaryFile(dir="/var/tmp") as archive:
                for chunk in source.images.get(tag).save(named=True):
                    archive.write(chunk)
                for host in self.hosts.values():
                    client = host.client(timeout=600)
                    if not client.images.list(name=tag):
                        archive.seek(0)
                        client.images.load(archive)

    def close(self) -> None:
        errors = []
        for host in self.hosts.values():
            try:
                host.destroy()
            except Exception as error:  # noqa: BLE001 -- every host is removed, the first error raised after
                errors.append(f"{host.name}: {error}")
        with contextlib.suppress(OSError):
            DATA.rmdir()  # only when empty: what another run holds stays
        if errors:
            raise RuntimeError("; ".join(errors))


def sweep_dead_hosts() -> list[str]:
    """Removes the test hosts a killed run left behind: a `sshost<n>` namespace in which nothing runs (its holder,
    daemon and sshd died with the run), its veth and every data root no live host uses. A new run would otherwise
    fail at `ip netns add` ("File exists"). Returns what it removed."""
    removed, alive = [], set()
    for line in _run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if not (name.startswith("sshost") and name[len("sshost"):].isdigit()):
            continue
        if _run("ip", "netns", "pids", name, check=False).stdout.strip():
            alive.add(name)
            continue
        _run("ip", "netns", "del", name, check=False)
        _run("ip", "link", "del", f"sshv{name[len('sshost'):]}", check=False)
        removed.append(f"netns {name}")
    if not alive and DATA.is_dir():
        for entry in DATA.iterdir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def leftovers(hosts: list[TestHost]) -> list[str]:
    """What of `hosts` is still on this machine (namespaces, veths, data roots); [] after a clean close."""
    netns = {line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line.strip()}
    links = {line.split(":")[1].strip().split("@")[0] for line in _run("ip", "-o", "link").stdout.splitlines()}
    return [thing for host in hosts for thing, there in ((host.netns, host.netns in netns), (host.veth, host.veth in links),
                                                         (str(host.dir), host.dir.exists())) if there]

"""The connection logger's program (components/assets/connlog.py) without the kernel's queue: the line it writes
for a queued packet, and the size-bounded rotation of its log and the resolvers' logs. Its queue and verdicts
are proven on the engine (tests/engine/test_network_logger_bounds.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import struct
import time

import pytest

from sandstack.plan.package_files import CONNECTION_LOGGER_SOURCE
from sandstack.plan.reload import ConfigSet
from tests.assets.fakes import RELOAD


@pytest.fixture
def connlog(monkeypatch, tmp_path):
    env = {"SANDSTACK_QUEUE": "2000", "SANDSTACK_LOGGED_MARK": "0x20000000",
           "SANDSTACK_CONNECTION_LOG": str(tmp_path / "connections.log"), "SANDSTACK_DNS_LOG_DIR": str(tmp_path),
           "SANDSTACK_LOG_MAX_BYTES": "100", "SANDSTACK_LOG_KEEP": "2",
           "SANDSTACK_CONFIG_DIR": str(tmp_path / "config")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("connlog", CONNECTION_LOGGER_SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "host", "h")
    # The pools' sources, as a configuration in force sets them.
    monkeypatch.setattr(module, "sources", module.parse_sources("shell 10.213.64.0/23\nother 10.213.2.0/23"))
    return module


def _ipv4(proto: int, src: str, dst: str, transport: bytes) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(transport), 1, 0, 64, proto, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))
    return header + transport


def test_a_packets_line_names_the_pool_by_its_source_and_the_destination(connlog, monkeypatch):
    monkeypatch.setattr(connlog.time, "strftime", lambda fmt: "Nov 26 04:10:00")
    monkeypatch.setattr(connlog, "interface", lambda index: {7: "ss-abc", 2: "eth0"}[index])
    udp = _ipv4(17, "10.213.64.3", "198.18.0.2", struct.pack("!HHHH", 40312, 5353, 8, 0))
    attrs = {connlog.A_PAYLOAD: udp, connlog.A_INDEV: struct.pack("!I", 7), connlog.A_OUTDEV: struct.pack("!I", 2)}
    assert connlog.line(attrs) == ("Nov 26 04:10:00 h pool=shell IN=ss-abc OUT=eth0 SRC=10.213.64.3 DST=198.18.0.2 "
                                   "LEN=28 PROTO=UDP SPT=40312 DPT=5353\n")
    icmp = _ipv4(1, "10.213.2.9", "198.18.0.2", bytes([8, 0, 0, 0]))
    assert connlog.line({connlog.A_PAYLOAD: icmp}) == (
        "Nov 26 04:10:00 h pool=other IN= OUT= SRC=10.213.2.9 DST=198.18.0.2 LEN=24 PROTO=ICMP TYPE=8 CODE=0\n")
    # Not IPv4 (sandbox networks have none): no line, and the caller drops the packet.
    assert connlog.line({connlog.A_PAYLOAD: b"\x60" + bytes(39)}) is None


def test_a_log_past_its_bound_is_shifted_and_the_oldest_dropped(connlog, tmp_path):
    log = tmp_path / "connections.log"
    reopened = []
    log.write_text("x" * 99)
    assert connlog.rotate(str(log), lambda: reopened.append(1)) is False  # under the bound: left alone
    for generation in ("a", "b", "c"):
        log.write_text(generation * 100)
        assert connlog.rotate(str(log), lambda: reopened.append(1)) is True
    # Two kept (SANDSTACK_LOG_KEEP), the newest first; the writer reopened the log each time.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["connections.log.1", "connections.log.2"]
    assert (tmp_path / "connections.log.1").read_text() == "c" * 100
    assert (tmp_path / "connections.log.2").read_text() == "b" * 100
    assert reopened == [1, 1, 1]


def test_a_resolver_reopens_its_log_on_sigusr2(connlog, monkeypatch, tmp_path):
    sent = []
    monkeypatch.setattr(connlog.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(
        tmp_path / "shell.pid" if path == "/tmp/dnsmasq-shell.pid" else path, *a, **k))
    (tmp_path / "shell.pid").write_text("4242\n")
    connlog.reopen_resolver("shell")()
    assert sent == [(4242, signal.SIGUSR2)]


# --- its configuration: the resolvers, taken in place --------------------------------------------------------------

# dnsmasq: records its command line under the pool its pid file names and runs until stopped; an option `--bogus`
# makes it refuse at once, as dnsmasq does a bad option.
DNSMASQ_STUB = r"""#!/bin/sh
for a in "$@"; do case $a in --pid-file=*) pool=${a#--pid-file=/tmp/dnsmasq-}; pool=${pool%.pid} ;; esac; done
case " $* " in *" --bogus "*) echo "dnsmasq: bad command line options: try --help" >&2; exit 1 ;; esac
echo "$$ $*" >> @DIR@/$pool.started
exec sleep 600
"""


@pytest.fixture
def logger(connlog, monkeypatch, tmp_path):
    """The program's Config and Resolvers, with dnsmasq a stub on PATH and sets delivered as the reload container
    delivers them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dnsmasq").write_text(DNSMASQ_STUB.replace("@DIR@", str(tmp_path)))
    (bin_dir / "dnsmasq").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    # The resolvers' stderr in this test's folder: in /tmp, parallel runs of this test shared (and truncated) it.
    monkeypatch.setattr(connlog, "ERRORS", str(tmp_path))
    resolvers = connlog.Resolvers()
    yield connlog.Config(resolvers)
    for pool in list(resolvers.running):
        resolvers.stop(pool)


def _give(tmp_path, resolvers: str, sources: str = "listed 10.213.98.0/23", upstream: str = "10.0.0.53 10.0.0.54"):
    config = ConfigSet("logger", (("SOURCES", sources), ("RESOLVERS", resolvers), ("DNS_UPSTREAM", upstream)))
    RELOAD.deliver(str(tmp_path / "config"), config.digest, dict(config.items))
    RELOAD.point_want(str(tmp_path / "config"), config.digest)
    return config.digest


def _started(tmp_path, pool: str) -> list[str]:
    path = tmp_path / f"{pool}.started"
    return path.read_text().splitlines() if path.exists() else []


def _wait_started(tmp_path, pool: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(_started(tmp_path, pool)) < count:
        assert time.monotonic() < deadline, f"{pool}'s resolver did not start"
        time.sleep(0.02)


LISTED = "listed 10.213.98.1 --address=/#/ --server=/example.com/@UPSTREAM@"
ANY = "any 10.213.64.1 --server=@UPSTREAM@"


def test_a_set_starts_a_resolver_per_pool_with_each_upstream_and_is_reported_in_force(connlog, logger, tmp_path):
    digest = _give(tmp_path, f"{LISTED}\n{ANY}", sources="any 10.213.64.0/23")
    logger.check()
    for pool in ("listed", "any"):
        _wait_started(tmp_path, pool, 1)
    assert _started(tmp_path, "listed")[0].split(" ", 1)[1] == (
        "--keep-in-foreground --user= --group= --pid-file=/tmp/dnsmasq-listed.pid --bind-dynamic --no-hosts "
        f"--no-resolv --except-interface=lo --listen-address=10.213.98.1 --log-queries=extra "
        f"--log-facility={tmp_path / 'listed.log'} --address=/#/ --server=/example.com/10.0.0.53 "
        "--server=/example.com/10.0.0.54")
    assert RELOAD.read_status(str(tmp_path / "config"), "have") == digest
    assert connlog.sources == connlog.parse_sources("any 10.213.64.0/23")


def test_a_changed_pool_restarts_only_its_own_resolver(logger, tmp_path):
    _give(tmp_path, f"{LISTED}\n{ANY}")
    logger.check()
    _wait_started(tmp_path, "any", 1)
    digest = _give(tmp_path, f"{LISTED} --server=/example.org/@UPSTREAM@\n{ANY}")
    logger.check()
    _wait_started(tmp_path, "listed", 2)
    assert len(_started(tmp_path, "any")) == 1  # the other pool's resolver kept running
    assert RELOAD.read_status(str(tmp_path / "config"), "have") == digest


def test_a_set_a_resolver_refuses_is_reported_and_the_resolvers_in_force_run_again(logger, tmp_path):
    good = _give(tmp_path, f"{LISTED}\n{ANY}")
    logger.check()
    _wait_started(tmp_path, "listed", 1)
    bad = _give(tmp_path, f"{LISTED} --bogus\n{ANY}")
    logger.check()
    assert RELOAD.read_status(str(tmp_path / "config"), "refused") == \
        f"{bad} the resolver of listed did not start: dnsmasq: bad command line options: try --help"
    assert RELOAD.read_status(str(tmp_path / "config"), "have") == good
    _wait_started(tmp_path, "listed", 2)  # started again with what was in force
    assert _started(tmp_path, "listed")[1].split(" ", 1)[1] == _started(tmp_path, "listed")[0].split(" ", 1)[1]
    assert len(_started(tmp_path, "any")) == 1

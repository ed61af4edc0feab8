"""The connection logger's program (components/assets/connlog.py) without the kernel's queue: the line it writes
for a queued packet, and the size-bounded rotation of its log and the resolvers' logs. Its queue and verdicts
are proven on the engine (tests/engine/test_network_logger_bounds.py)."""

from __future__ import annotations

import importlib.util
import signal
import socket
import struct

import pytest

from sandstack.plan.package_files import CONNECTION_LOGGER_SOURCE


@pytest.fixture
def connlog(monkeypatch, tmp_path):
    env = {"SANDSTACK_QUEUE": "2000", "SANDSTACK_LOGGED_MARK": "0x20000000",
           "SANDSTACK_CONNECTION_LOG": str(tmp_path / "connections.log"), "SANDSTACK_DNS_LOG_DIR": str(tmp_path),
           "SANDSTACK_SOURCES": "shell 10.213.64.0/23\nother 10.213.2.0/23", "SANDSTACK_LOG_MAX_BYTES": "100",
           "SANDSTACK_LOG_KEEP": "2"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("connlog", CONNECTION_LOGGER_SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "host", "h")
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

"""The runtime's SSH endpoint in the review (docs/design/ssh.md): the preview shows its address and port and the
config key of its host key's secret (never the key), and the change summary names it a loosening."""

from __future__ import annotations

import json

from sandstack.tooling.cli import main
from testbed.specs import host, spec, write_spec

RUNTIME = {"token": {"secret": "runtimeToken"}}
DATA = spec({"agent": {"base_image": "python:3.12-slim"}},
            hosts={"local": {**host(), "runtime": {**RUNTIME, "exposure": "public",
                                                   "ssh": {"port": 2200, "host_key": {"secret": "sshHostKey"}}}}})


def test_the_preview_shows_the_ssh_port_and_its_host_key_s_secret_key(tmp_path, capsys):
    path = write_spec(tmp_path / "spec", DATA)
    assert main(["preview", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the tree wraps long lines
    assert ("SSH and SFTP into sessions' sandboxes on 0.0.0.0:2200 (a session's token or its claim's keys; host key "
            "from secret sshHostKey; no forwarding; at most 16 connections per source address)") in text
    assert main(["preview", str(path), "--format", "json"]) == 0
    resources = json.loads(capsys.readouterr().out)["resources"]
    runtime = next(r for r in resources if r["kind"] == "runtime" and "ssh" in r["props"])
    assert runtime["props"]["ssh"] == {"listen": "0.0.0.0:2200", "host_key": {"secret": "sshHostKey"},
                                       "forwarding": "none", "max_connections_per_source": 16}


def _forwarding(forwarding: str, per_source: int) -> dict:
    data = json.loads(json.dumps(DATA))
    data["hosts"]["local"]["runtime"]["ssh"].update(forwarding=forwarding, max_connections_per_source=per_source)
    return data


def test_the_preview_and_the_diff_name_local_forwarding_and_the_bound_per_source(tmp_path, capsys):
    path = write_spec(tmp_path / "head", _forwarding("local", 4))
    assert main(["preview", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert ("host key from secret sshHostKey; local forwards to the session's own sandbox; at most 4 connections per "
            "source address)") in text
    base = write_spec(tmp_path / "base", DATA)
    main(["diff", str(base), str(path)])
    out = capsys.readouterr().out
    assert ("LOOSER  pool agent: SSH logins on host local may forward local ports to their own sandbox's ports "
            "(forwarding none → local)") in out
    assert "tighter  pool agent: SSH connections one source address may hold on host local: 16 → 4" in out
    main(["diff", str(path), str(base)])
    out = capsys.readouterr().out
    assert "tighter  pool agent: SSH forwarding on host local turned off (forwarding local → none)" in out
    assert "LOOSER  pool agent: SSH connections one source address may hold on host local: 4 → 16" in out


def test_a_runtime_without_ssh_shows_none(tmp_path, capsys):
    data = spec({"agent": {"base_image": "python:3.12-slim"}}, hosts={"local": {**host(), "runtime": RUNTIME}})
    path = write_spec(tmp_path / "spec", data)
    assert main(["preview", str(path)]) == 0
    assert "SSH" not in capsys.readouterr().out
    assert main(["preview", str(path), "--format", "json"]) == 0
    resources = json.loads(capsys.readouterr().out)["resources"]
    assert not any("ssh" in r["props"] for r in resources if r["kind"] == "runtime")


def test_the_diff_names_an_ssh_endpoint_added_as_looser_and_removed_as_tighter(tmp_path, capsys):
    base = spec({"agent": {"base_image": "python:3.12-slim"}}, hosts={"local": {**host(), "runtime": RUNTIME}})
    without = write_spec(tmp_path / "base", base)
    with_ssh = write_spec(tmp_path / "head", DATA)
    main(["diff", str(without), str(with_ssh)])
    assert ("LOOSER  pool agent: SSH endpoint added to host local's runtime, on every interface port 2200: a "
            "session's token or claim key opens a shell in its sandbox") in capsys.readouterr().out
    main(["diff", str(with_ssh), str(without)])
    assert "tighter  pool agent: SSH endpoint of host local's runtime removed" in capsys.readouterr().out

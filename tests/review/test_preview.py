"""`sandstack preview`: secrets by key only, exit statuses, stable JSON."""

from __future__ import annotations

import json
from pathlib import Path

from sandstack.tooling.cli import main
from tests.review.cases import BASE, FILES, pair
from testbed.specs import write_spec


def _preview(tmp_path: Path, monkeypatch, capsys, data: dict, *extra: str) -> tuple[int, str, str]:
    write_spec(tmp_path / "spec", data, FILES)
    monkeypatch.chdir(tmp_path)
    code = main(["preview", "spec/stack.yaml", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_secret_env_shows_its_key_and_plain_env_stays_readable(tmp_path, monkeypatch, capsys):
    code, out, err = _preview(tmp_path, monkeypatch, capsys, BASE)
    assert (code, err) == (0, "")
    assert "env GITHUB_TOKEN=<secret githubToken>, HTTPS_PROXY=" in out and ", MODE=agent, NO_PROXY=" in out


def test_json_is_stable_sorted_and_has_no_floats_where_integers_are_meant(tmp_path, monkeypatch, capsys):
    _, first, _ = _preview(tmp_path, monkeypatch, capsys, BASE, "--format", "json")
    _, again, _ = _preview(tmp_path, monkeypatch, capsys, BASE, "--format", "json")
    assert first == again
    data = json.loads(first)
    assert first == json.dumps(data, sort_keys=True, indent=2) + "\n"
    sandbox = next(r for r in data["resources"] if r["name"] == "sandstack-agent.gpu-1-0")
    assert (sandbox["props"]["memory_mb"], sandbox["props"]["shm_size_mb"], sandbox["props"]["pids"]) == (1024, 16, 256)
    assert sandbox["props"]["env"]["GITHUB_TOKEN"] == {"secret": "githubToken"}


def test_an_invalid_spec_prints_its_located_errors_and_exits_1(tmp_path, monkeypatch, capsys):
    bad = {**BASE, "templates": {**BASE["templates"], "shell": {"base_image": "busybox:1.36", "limits": {"cpus": "lots"}}}}
    code, out, err = _preview(tmp_path, monkeypatch, capsys, bad)
    assert code == 1 and out == ""
    assert err.startswith("spec/stack.yaml is not a valid sandstack spec:\n")
    assert "$.templates.shell.limits.cpus" in err and "Traceback" not in err


def test_an_unreadable_spec_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["preview", "missing.yaml"]) == 2
    assert capsys.readouterr().err == "sandstack: missing.yaml: no such file\n"


def test_url_ports_show_their_urls_and_secret_files_their_config_keys(tmp_path, monkeypatch, capsys):
    _, data = pair("port-url")
    data["templates"]["agent"]["secrets"] = [{"secret": "githubToken", "path": "/run/secrets/github-token"}]
    data["hosts"]["gpu-1"]["ingress"]["port"] = 8443
    data["hosts"]["gpu-1"]["ingress"]["exposure"] = "host"
    code, out, err = _preview(tmp_path, monkeypatch, capsys, data)
    assert (code, err) == (0, "")
    assert "port 8000/tcp url https://8000-agent-0.sbx.example.com:8443 (on the host's loopback)\n" in out
    assert "port 8000/tcp url https://8000-agent-2.sbx.example.com:8443 (on the host's loopback)\n" in out
    assert "secret files /run/secrets/github-token ← <secret githubToken>\n" in out


def test_lifecycle_without_limits_reads_unlimited_and_never_without_a_unit(tmp_path, monkeypatch, capsys):
    data, _ = pair("pool-resized")
    data["templates"]["shell"]["lifecycle"] = {"max_lifetime": "0s"}
    code, out, err = _preview(tmp_path, monkeypatch, capsys, data)
    assert (code, err) == (0, "")
    lines = [line.split("── ", 1)[1] for line in out.splitlines() if "lifecycle:" in line]
    assert lines == ["lifecycle: max 28800s, idle 1800s, on expiry stop",  # agent
                     "lifecycle: max unlimited, idle never, on expiry stop"]  # shell (it said "max unlimiteds")

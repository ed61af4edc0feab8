"""The review shows a template's platform (issue 39 item 6): on its snapshot and its sandboxes in `preview`, as a
rebuild with its reason in `diff`, never as a loosening; and an env reference's rendered value (item 7)."""

from __future__ import annotations

import json

from sandstack.tooling.cli import main
from testbed.specs import host, spec, write_spec

BOTH = {"local": host(platforms=["linux/amd64", "linux/arm64"])}


def _spec(platform: str | None) -> dict:
    return spec({"shell": {"base_image": "busybox:1.36", **({"platform": platform} if platform else {})}},
                hosts=BOTH)


def _run(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(tmp_path)
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_preview_shows_the_platform_only_where_declared(tmp_path, monkeypatch, capsys):
    write_spec(tmp_path / "arm", _spec("linux/arm64"))
    write_spec(tmp_path / "none", _spec(None))
    code, arm, err = _run(monkeypatch, capsys, tmp_path, "preview", "arm/stack.yaml")
    assert (code, err) == (0, "")
    assert "from busybox:1.36, 0 setup steps, 0 files, for linux/arm64" in arm
    assert [line.strip(" │├└─") for line in arm.splitlines() if "platform" in line] == ["platform linux/arm64"]
    code, none, err = _run(monkeypatch, capsys, tmp_path, "preview", "none/stack.yaml")
    assert (code, err, "platform" in none, "0 files, for" in none) == (0, "", False, False)


def test_diff_rebuilds_on_a_platform_change_and_says_why_never_a_loosening(tmp_path, monkeypatch, capsys):
    write_spec(tmp_path / "base", _spec("linux/amd64"))
    write_spec(tmp_path / "head", _spec("linux/arm64"))
    code, out, err = _run(monkeypatch, capsys, tmp_path, "diff", "base/stack.yaml", "head/stack.yaml", "--format",
                          "json", "--fail-on", "security")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["snapshots"] == [{"host": "local", "template": "shell", "unbumped": False,
                                  "why": ["platform linux/amd64 → linux/arm64"]}]
    changed = {r["name"]: (r["action"], r["changed"]["platform"], [(x["path"], x["effect"]) for x in r["reasons"]])
               for r in data["resources"] if "platform" in r["changed"]}
    assert changed == {
        "sandstack-shell.local-image": ("replace", {"old": "linux/amd64", "new": "linux/arm64"},
                                        [("templates.shell.platform", "rebuild")]),
        "sandstack-shell.local-0": ("replace", {"old": "linux/amd64", "new": "linux/arm64"},
                                    [("templates.shell.platform", "rebuild")])}
    assert data["security"] == []
    assert [(f["path"], f["category"]) for f in data["fields"]] == [("templates.shell.platform", "disruption")]


def test_preview_shows_an_env_reference_rendered(tmp_path, monkeypatch, capsys):
    data = spec({"web": {"base_image": "busybox:1.36", "env": {"ALLOWED_HOSTS": "8080-${SANDSTACK_PUBLIC_HOSTNAME}"},
                         "ports": [{"port": 8080, "exposure": "url"}]}},
                hosts={"local": host(ingress={"domain": "sbx.example.com"})})
    write_spec(tmp_path / "web", data)
    code, out, err = _run(monkeypatch, capsys, tmp_path, "preview", "web/stack.yaml", "--format", "json")
    assert (code, err) == (0, "")
    envs = [r["props"]["env"] for r in json.loads(out)["resources"] if r["kind"] == "sandbox"]
    assert [(e["ALLOWED_HOSTS"], e["SANDSTACK_PUBLIC_HOSTNAME"]) for e in envs] == [
        ("8080-web-0.sbx.example.com", "web-0.sbx.example.com")]

"""Scoped runtime tokens in the review: the preview names each scope, its secret's config key and its pools; the
token itself is never in the spec, so never shown."""

from __future__ import annotations

import json

from sandstack.tooling.cli import main
from testbed.specs import host, spec, write_spec

DATA = spec({"agent": {"base_image": "python:3.12-slim"}, "plain": {"base_image": "busybox:1.36"}},
            hosts={"local": {**host(), "runtime": {"token": {"secret": "runtimeToken"}, "tokens": {
                "tenant": {"secret": "tenantToken", "pools": ["agent"]}}}}})


def test_the_preview_names_each_scoped_tokens_secret_key_and_pools(tmp_path, capsys):
    path = write_spec(tmp_path / "spec", DATA)
    assert main(["preview", str(path)]) == 0
    text = capsys.readouterr().out
    assert "└── token 'tenant' (secret tenantToken) acts only on pools agent\n" in text
    assert main(["preview", str(path), "--format", "json"]) == 0
    resources = json.loads(capsys.readouterr().out)["resources"]
    runtime = next(r for r in resources if r["kind"] == "runtime" and "tokens" in r["props"])
    # The secret's key is the container's (its environment); the pools are its configuration's.
    assert runtime["props"]["tokens"] == {"tenant": {"secret": "tenantToken"}}
    assert runtime["props"]["token_pools"] == {"tenant": ["agent"]}

"""Secrets: env references become secret `envs`; secret files go through a run-once seeder onto a volume."""

from __future__ import annotations

import pulumi
import pytest

from tests.components.helpers import Built
from testbed.specs import spec
from testbed.provider.mocks import DryBackend, RecordingMocks

AGENT = {
    "base_image": "busybox:1.36",
    "env": {"TOKEN": {"secret": "apiToken"}, "OTHER": {"secret": "vault:key"}, "PLAIN": "x"},
    "secrets": [{"secret": "githubToken", "path": "/run/secrets/github-token"},
                {"secret": "sshKey", "path": "/run/secrets/ssh/id"}],
}
SECRETS = {"apiToken": "tok", "vault:key": "vault-value", "githubToken": "gh-secret", "sshKey": "KEY"}
POOLS = {"agent": {"template": "agent", "hosts": ["local"], "replicas": 2}}
SEED_SCRIPT = (
    "set -e\n"
    # The mount point of the session secrets' tmpfs, inside the read-only volume: kept by a re-seed.
    "find /seed -mindepth 1 ! -path /seed/session -delete\n"
    "mkdir -p /seed/session && chmod 0700 /seed/session\n"
    'mkdir -p "$(dirname /seed/github-token)" && rm -f /seed/github-token && cp /staging/0 /seed/github-token'
    " && chmod 0400 /seed/github-token && chown 10001:10001 /seed/github-token\n"
    'mkdir -p "$(dirname /seed/ssh/id)" && rm -f /seed/ssh/id && cp /staging/1 /seed/ssh/id'
    " && chmod 0400 /seed/ssh/id && chown 10001:10001 /seed/ssh/id\n"
    "rm -f /staging/*"
)


class SeederExits(DryBackend):
    """Dry outputs, plus the exit code the provider records for the run-once seeder."""

    def __init__(self, code: int):
        super().__init__()
        self.code = code

    def create(self, reg, mapping, autoname):
        ident, outputs = super().create(reg, mapping, autoname)
        if reg.name.endswith("-secrets-seeder"):
            outputs["exitCode"] = self.code
        return ident, outputs


def test_env_secret_references_become_secret_envs(build):
    built = build(spec({"agent": AGENT}, pools=POOLS), secret_config=SECRETS)
    c = built.container("sandstack-agent.local-0")
    assert c.inputs["envs"] == ["OTHER=vault-value", "PLAIN=x", "TOKEN=tok"]
    assert c.secret_paths == frozenset({"envs"})


def test_plain_env_is_not_secret(build):
    template = {"base_image": "busybox:1.36", "env": {"PLAIN": "x"}}
    c = build(spec({"agent": template})).container("sandstack-agent.local-0")
    assert (c.inputs["envs"], c.secret_paths) == (["PLAIN=x"], frozenset())


def test_the_seeder_uploads_each_secret_and_copies_it_owned_by_the_sandbox_user(build):
    built = build(spec({"agent": AGENT}, pools=POOLS), secret_config=SECRETS)
    seeder = built.container("sandstack-agent.local-secrets-seeder")
    assert seeder.inputs == {
        "name": "sandstack-t-agent-secrets-seeder",
        "image": built.reg("sandstack-local-infra").outputs["imageId"],
        "networkMode": "none",
        "command": ["sh", "-c", SEED_SCRIPT],
        "uploads": [{"file": "/staging/0", "content": "gh-secret", "permissions": "0400"},
                    {"file": "/staging/1", "content": "KEY", "permissions": "0400"}],
        "mounts": [{"type": "volume", "source": "sandstack-t-agent-secrets", "target": "/seed"}],
        "capabilities": {"drops": ["ALL"], "adds": ["CHOWN"]},
        "securityOpts": ["no-new-privileges:true"],
        "attach": True,
        "mustRun": False,
        "logs": True,
        "labels": [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
                   {"label": "sandstack.stack", "value": "t"}, {"label": "sandstack.role", "value": "secrets-seeder"}],
    }
    assert seeder.secret_paths == frozenset({"uploads"})
    assert seeder.plan.host["NetworkMode"] == "none"
    assert (seeder.plan.must_run, seeder.plan.attach) == (False, True)


def test_the_seeder_chowns_to_the_templates_own_user(build):
    template = {**AGENT, "user": "2000:3000", "env": {}}
    built = build(spec({"agent": template}), secret_config=SECRETS)
    script = built.container("sandstack-agent.local-secrets-seeder").inputs["command"][2]
    assert "chown 2000:3000 /seed/github-token\n" in script and "10001" not in script


def test_sandboxes_mount_the_secrets_volume_read_only_and_wait_for_the_seeder(build):
    built = build(spec({"agent": AGENT}, pools=POOLS), secret_config=SECRETS)
    volume = built.reg("sandstack-agent.local-secrets")
    assert volume.inputs == {"name": "sandstack-t-agent-secrets",
                             "labels": [{"label": "sandstack.host", "value": "local"},
                                        {"label": "sandstack.managed-by", "value": "pulumi"},
                                        {"label": "sandstack.stack", "value": "t"}]}
    assert volume.request.delete_before_replace is True
    seeder = built.container("sandstack-agent.local-secrets-seeder")
    for i in range(2):
        c = built.container(f"sandstack-agent.local-{i}")
        assert c.inputs["mounts"] == [
            {"type": "volume", "source": "sandstack-t_guard-state", "target": "/run/sandstack/guard", "readOnly": True},
            {"type": "volume", "source": "sandstack-t-agent-secrets", "target": "/run/secrets", "readOnly": True},
        ]
        assert seeder.urn in c.request.dependencies
        assert "uploads" not in c.inputs  # the read-only root could not take them


def test_without_secret_files_there_is_no_seeder_and_no_volume(build):
    built = build(spec({"agent": {**AGENT, "secrets": []}}), secret_config=SECRETS)
    assert [r.name for r in built.mocks.registrations.values() if "secrets" in r.name] == []
    mounts = built.container("sandstack-agent.local-0").inputs["mounts"]
    assert [m["target"] for m in mounts] == ["/run/sandstack/guard"]


def test_a_seeder_that_exited_0_lets_the_sandboxes_start(tmp_path):
    built = Built.from_spec(tmp_path, spec({"agent": AGENT}, pools=POOLS), secret_config=SECRETS,
                            mocks=RecordingMocks(SeederExits(0)))
    assert [s["name"] for s in built.sandboxes] == ["local/agent/0", "local/agent/1"]


def test_a_failed_seeder_fails_the_program_and_no_sandbox_is_created(tmp_path):
    mocks = RecordingMocks(SeederExits(3))
    with pytest.raises(pulumi.RunError) as failure:
        Built.from_spec(tmp_path, spec({"agent": AGENT}, pools=POOLS), secret_config=SECRETS, mocks=mocks)
    assert str(failure.value) == ("secrets seeder for pool 'agent' on host 'local' exited with 3: "
                                  "its sandboxes would start without their secrets")
    assert "sandstack-agent.local-secrets-seeder" in {r.name for r in mocks.registrations.values()}
    assert [r.name for r in mocks.by_type("Container") if r.name.startswith("sandstack-agent.local-")] == \
        ["sandstack-agent.local-secrets-seeder"]


@pytest.mark.parametrize("missing", ["apiToken", "vault:key", "sshKey"])
def test_a_missing_secret_fails_with_pulumis_message_naming_the_key(build, missing):
    key = missing if ":" in missing else f"sandstack:{missing}"
    with pytest.raises(pulumi.ConfigMissingError) as failure:
        build(spec({"agent": AGENT}, pools=POOLS), secret_config={k: v for k, v in SECRETS.items() if k != missing})
    assert str(failure.value) == (f"Missing required configuration variable '{key}'\n"
                                  f"\tplease set a value using the command `pulumi config set --secret {key} <value>`")

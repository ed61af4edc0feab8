"""A pool's secrets seeder as a plan, without Pulumi: its volume, name, owner, uploads (config keys, never values),
script and mounts. test_secrets.py checks the component registers exactly these."""

from __future__ import annotations

from sandstack.plan.secrets import SecretUpload, owner_of, plan_secrets
from sandstack.spec import load_stack
from tests.components.test_secrets import AGENT, SEED_SCRIPT
from testbed.specs import spec, write_spec


def _template(tmp_path, template: dict):
    return load_stack(write_spec(tmp_path, spec({"agent": template}))).templates["agent"]


def test_the_secrets_plan_names_every_part_of_the_seeder(tmp_path):
    plan = plan_secrets("t", "agent", _template(tmp_path, AGENT))
    assert plan is not None
    assert (plan.volume, plan.seeder_name, plan.role) == (
        "sandstack-t-agent-secrets", "sandstack-t-agent-secrets-seeder", "secrets-seeder")
    assert plan.uploads == (SecretUpload("/staging/0", "githubToken"), SecretUpload("/staging/1", "sshKey"))
    assert plan.script == SEED_SCRIPT
    assert (plan.seed_dir, plan.path, plan.mode, plan.capability_adds) == ("/seed", "/run/secrets", "0400", ("CHOWN",))


def test_the_owner_is_the_sandbox_user_with_its_own_group_unless_one_is_named(tmp_path):
    assert (owner_of("10001"), owner_of("2000:3000")) == ("10001:10001", "2000:3000")
    plan = plan_secrets("t", "agent", _template(tmp_path, {**AGENT, "user": "2000:3000", "env": {}}))
    assert plan.owner == "2000:3000" and "chown 2000:3000 /seed/ssh/id" in plan.script


def test_a_template_without_secret_files_has_no_seeder(tmp_path):
    assert plan_secrets("t", "agent", _template(tmp_path, {**AGENT, "secrets": []})) is None

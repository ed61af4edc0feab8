"""`security.sudo` on the real engine: the sandbox user runs root actions through sudo, passwordless, and a
template without it cannot (same image contents, sudo installed, no sudoers rule and no_new_privileges on)."""

from __future__ import annotations

import pytest

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    common = {"base_image": debian_image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB"}}
    templates = {"admin": {**common, "security": {"sudo": True}}, "plain": common}
    with shared_deployment(__file__, tmp_path_factory.mktemp("sudo"), engine_spec(debian_image, templates)) as shared:
        yield shared


def test_the_sandbox_user_becomes_root_through_sudo_for_root_actions(stack):
    stack.proves("Container.capabilities.adds", "RemoteImage.build.dockerfile")
    sandbox = stack.container("admin")
    code, out = sh(sandbox, "id -u; sudo -n id -u")
    assert code == 0 and out.split()[:2] == ["10001", "0"], out
    code, out = sh(sandbox, "touch /tmp/f && chown 0:0 /tmp/f; echo $?; sudo -n chown 0:0 /tmp/f && stat -c %u /tmp/f")
    lines = out.split()
    assert code == 0 and lines[0] != "0" and lines[-1] == "0", out  # refused as the user, done through sudo


def test_a_template_without_sudo_cannot_use_it(stack):
    code, out = sh(stack.container("plain"), "id -u; sudo -n id -u")
    assert code != 0 and out.split()[0] == "10001" and "\n0" not in out, out

"""A writable root given back its image's root on the real engine (sandstack.runtime.rootfs, what a release does to a
template with `read_only_root: false`): what a session added, changed, removed or locked away outside its writable
paths is gone, the image's files are back, and the container is the same one (same id: `pulumi up` still finds it).

The container is made here rather than through a stack: a stack with a writable root needs a host with
`storage_quota` (rule `disk-enforced`), which this engine cannot give (overlay2 on a filesystem without
project quotas). What is under test is the runtime's reset, `DockerBackend.reset_root`, on a stopped container
with the sandbox's shape (its own image, a command, the sandbox user); the session's changes are made as root so
that root-owned and unreadable ones are covered too.
"""

from __future__ import annotations

import os
import uuid

import pytest

from sandstack.runtime.docker_backend import DockerBackend
from testbed.harness.docker_backend import LABEL_PID, LABEL_SESSION
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

# What a session does to the root: a new file, a changed image file, a removed image file, a directory nobody may
# read (owned by another user), a new file in a directory the image has.
SESSION = """
set -e
echo installed > /opt/added
echo changed > /etc/debian_version
rm /etc/issue
mkdir -p /var/locked && echo secret > /var/locked/inside && chown -R 4242:4242 /var/locked && chmod 000 /var/locked
echo left > /usr/local/bin/left-behind
"""
# What the next session sees: each line `path: state`.
LOOK = """
for f in /opt/added /var/locked /usr/local/bin/left-behind /etc/issue; do
    if [ -e "$f" ]; then echo "$f: present"; else echo "$f: absent"; fi
done
echo "/etc/debian_version: $(cat /etc/debian_version)"
"""


@pytest.fixture
def sandbox(docker_client, debian_image, harness_sweep_orphans):
    name = f"sandstack-root-reset-{uuid.uuid4().hex[:8]}"
    labels = {LABEL_SESSION: f"root-reset-{uuid.uuid4().hex}", LABEL_PID: str(os.getpid()),
              "sandstack.role": "sandbox"}
    container = docker_client.containers.create(debian_image, ["sleep", "infinity"], name=name, labels=labels,
                                                user="10001:10001", network_mode="none", init=True)
    try:
        yield container
    finally:
        container.remove(force=True)
        assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={labels[LABEL_SESSION]}"}) \
            == [], "the reset's helper was left behind"


def _sh(container, script: str) -> str:
    code, out = sh(container, script, user="0:0")
    assert code == 0, out
    return out


def test_a_reset_gives_a_writable_root_its_images_root_back(docker_client, debian_image, sandbox):
    sandbox.start()
    image_version = _sh(sandbox, "cat /etc/debian_version").strip()
    _sh(sandbox, SESSION)
    assert _sh(sandbox, LOOK).splitlines() == [
        "/opt/added: present", "/var/locked: present", "/usr/local/bin/left-behind: present", "/etc/issue: absent",
        "/etc/debian_version: changed"]
    sandbox.stop(timeout=1)
    before = docker_client.api.inspect_container(sandbox.name)

    DockerBackend().reset_root(sandbox.name)

    sandbox.start()
    assert _sh(sandbox, LOOK).splitlines() == [
        "/opt/added: absent", "/var/locked: absent", "/usr/local/bin/left-behind: absent", "/etc/issue: present",
        f"/etc/debian_version: {image_version}"]
    after = docker_client.api.inspect_container(sandbox.name)
    assert (after["Id"], after["Image"], after["GraphDriver"]["Data"]["UpperDir"]) == (
        before["Id"], before["Image"], before["GraphDriver"]["Data"]["UpperDir"])
    # The sandbox's own processes run as before (its user, its command).
    assert sandbox.exec_run(["id", "-u"]).output.decode().strip() == "10001"


def test_a_reset_of_an_untouched_root_changes_nothing(docker_client, sandbox):
    sandbox.start()
    first = _sh(sandbox, LOOK)
    sandbox.stop(timeout=1)
    DockerBackend().reset_root(sandbox.name)
    sandbox.start()
    assert _sh(sandbox, LOOK) == first

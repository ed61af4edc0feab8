"""Snapshot images on a real engine: setup runs once at build, re-applying builds nothing, and a bumped
version or a changed setup builds a new image that the pool's sandboxes move to.

Each test applies its stack more than once, so each has its own harness (`docker_harness`, torn down
after the test). A setup step writes a build stamp (time + random) and appends to a run counter, so the
image itself records how often and when the setup ran.
"""

from __future__ import annotations

from datetime import datetime

import docker.errors
import pytest

from testbed.deploy import Deployment, engine_spec
from tests.engine.sandbox_helpers import client, sh, state
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

STAMP_SETUP = [
    "date +%s > /etc/built-at && od -An -N8 -tx1 /dev/urandom | tr -d ' \\n' > /etc/build-random",
    "echo ran >> /etc/setup-runs",
]
READ_STAMP = "cat /etc/built-at /etc/build-random; echo; wc -l < /etc/setup-runs"


def _spec(infra: str, image: str, version: str = "1", setup: list[str] | None = None, replicas: int = 1) -> str:
    templates = {"snap": {"base_image": image, "command": ["sleep", "100000"], "limits": {"memory": "16MiB"},
                          "snapshot": {"version": version, "setup": setup or STAMP_SETUP}}}
    return engine_spec(infra, templates, {"snap": {"template": "snap", "hosts": ["local"], "replicas": replicas}})


def _stamp(container) -> tuple[float, str, int]:
    code, out = sh(container, READ_STAMP)
    assert code == 0, out
    built_at, random, runs = out.split()
    return float(built_at), random, int(runs)


def _started_at(container) -> float:
    started = state(container)["StartedAt"]  # RFC 3339 with nanoseconds
    return datetime.fromisoformat(started[:26].rstrip("Z") + "+00:00").timestamp()


def test_setup_ran_once_at_build_and_a_restart_does_not_rerun_it(docker_harness, debian_image, busybox_image, tmp_path):
    docker_harness.proves("RemoteImage.build", "RemoteImage.build.context", "Container.image")
    deployment = Deployment(docker_harness, tmp_path)
    result = deployment.up(_spec(debian_image, busybox_image))
    assert result.builds == 1
    sandbox = deployment.container("snap")
    built_at, random, runs = _stamp(sandbox)
    # The setup's output is in the image: it ran once, before the sandbox ever started...
    assert runs == 1
    assert built_at <= _started_at(sandbox)
    image = client().images.get(sandbox.image.id)
    history = " ".join(layer.get("CreatedBy", "") for layer in image.history())
    assert "echo ran >> /etc/setup-runs" in history and "/etc/build-random" in history
    # ...and the sandbox's read-only root could not have been written at start anyway.
    code, _ = sh(sandbox, "echo again >> /etc/setup-runs")
    assert code != 0

    # A restart (new process tree, fresh writable paths) sees the same build, and the count stays 1.
    before = _started_at(sandbox)
    sandbox.restart(timeout=5)
    wait_until(lambda: state(sandbox)["Running"] and _started_at(sandbox) > before, 30, what="restarted sandbox")
    assert _stamp(sandbox) == (built_at, random, 1)


def test_applying_the_same_spec_again_builds_nothing_and_changes_nothing(docker_harness, debian_image, busybox_image, tmp_path):
    docker_harness.proves("RemoteImage.triggers", "RemoteImage.name")
    deployment = Deployment(docker_harness, tmp_path)
    deployment.up(_spec(debian_image, busybox_image))
    sandbox = deployment.container("snap")
    before = (sandbox.id, sandbox.image.id, _stamp(sandbox), state(sandbox)["StartedAt"])

    again = deployment.up()  # the same spec file, a second `pulumi up`

    assert again.builds == 0
    assert again.summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0,
                               "same": len(again.actions), "build": 0}, str(again)
    after = deployment.container("snap")
    assert (after.id, after.image.id, _stamp(after), state(after)["StartedAt"]) == before


def test_bumped_snapshot_version_builds_a_new_image_and_moves_the_pool_to_it(docker_harness, debian_image, busybox_image, tmp_path):
    docker_harness.proves("RemoteImage.triggers", "RemoteImage.keepLocally", "Container.image", "Container.labels")
    deployment = Deployment(docker_harness, tmp_path)
    deployment.up(_spec(debian_image, busybox_image, version="1", replicas=2))
    old = [deployment.container("snap", i) for i in range(2)]
    old_image = old[0].image.id
    old_stamp = _stamp(old[0])
    assert {c.image.id for c in old} == {old_image}
    assert {c.labels["sandstack.version"] for c in old} == {"1"}

    moved = deployment.up(_spec(debian_image, busybox_image, version="2", replicas=2))

    # Same setup, new version: one new build, and both sandboxes replaced onto it.
    assert moved.builds == 1
    assert moved.action("sandstack-snap.local-image", "replace").built
    for i in range(2):
        assert "image" in moved.action(f"sandstack-snap.local-{i}", "replace").changed
    new = [deployment.container("snap", i) for i in range(2)]
    new_image = new[0].image.id
    assert new_image != old_image
    assert {c.image.id for c in new} == {new_image}
    assert {c.labels["sandstack.version"] for c in new} == {"2"}
    assert all(c.id not in {o.id for o in old} for c in new)
    assert client().images.get(new_image).labels["sandstack.version"] == "2"
    # The setup really ran again for the new image (new stamp), still once.
    new_stamp = _stamp(new[0])
    assert new_stamp[1] != old_stamp[1] and new_stamp[2] == 1
    # The superseded snapshot is gone from the host.
    with pytest.raises(docker.errors.ImageNotFound):
        client().images.get(old_image)


def test_changed_setup_with_the_same_version_rebuilds(docker_harness, debian_image, busybox_image, tmp_path):
    docker_harness.proves("RemoteImage.triggers", "Container.image", "Container.labels")
    deployment = Deployment(docker_harness, tmp_path)
    deployment.up(_spec(debian_image, busybox_image, version="1"))
    old = deployment.container("snap")
    old_digest, old_image, old_random = old.labels["sandstack.digest"], old.image.id, _stamp(old)[1]

    changed = deployment.up(_spec(debian_image, busybox_image, version="1", setup=[*STAMP_SETUP, "echo extra > /etc/extra"]))

    assert changed.builds == 1
    new = deployment.container("snap")
    assert new.labels["sandstack.version"] == "1"
    assert new.labels["sandstack.digest"] != old_digest
    assert new.image.id != old_image
    assert sh(new, "cat /etc/extra") == (0, "extra\n")
    # Every setup step ran again for the new build (a new stamp from the unchanged first step), once.
    assert _stamp(new)[1] != old_random and _stamp(new)[2] == 1
    with pytest.raises(docker.errors.ImageNotFound):
        client().images.get(old_image)


def test_templates_with_the_same_snapshot_build_once_per_host_and_share_the_image(docker_harness, debian_image,
                                                                                 busybox_image, tmp_path):
    """Three templates, one snapshot content (one `extends` another, one repeats it): one build, one image,
    whose setup ran once; each sandbox keeps its own settings."""
    snapshot = {"version": "1", "setup": STAMP_SETUP}
    templates = {
        "base": {"base_image": busybox_image, "command": ["sleep", "100000"], "limits": {"memory": "16MiB"},
                 "snapshot": snapshot},
        "child": {"extends": "base", "env": {"ROLE": "child"}},
        "twin": {"base_image": busybox_image, "command": ["sleep", "100001"], "limits": {"memory": "16MiB"},
                 "snapshot": snapshot},
    }
    deployment = Deployment(docker_harness, tmp_path)
    result = deployment.up(engine_spec(debian_image, templates))
    assert result.builds == 1
    sandboxes = [deployment.container(name) for name in templates]
    assert len({s.image.id for s in sandboxes}) == 1
    assert len({_stamp(s) for s in sandboxes}) == 1 and _stamp(sandboxes[0])[2] == 1
    code, out = sh(sandboxes[1], 'printf %s "$ROLE"')
    assert code == 0 and out == "child"

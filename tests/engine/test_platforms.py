"""A template's platform on the real engine (issue 39 item 6): its snapshot is built for it (a setup step records the
machine it ran on), the image says so (`Architecture`), and its sandbox runs as it (`uname -m`). linux/amd64 is this
machine's own; linux/arm64 runs under Debian's qemu-user-static (testbed/emulation.py), from a busybox image built here
from Debian's arm64 package (testbed/images.py), never pulled: skipped, saying why, where emulation cannot be set up.
"""

from __future__ import annotations

import pytest
import yaml

from testbed import emulation, images
from testbed.deploy import engine_spec, shared_deployment
from testbed.specs import spec_text
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

# Runs at build time, as the build's platform: what the snapshot image keeps of the machine it was built on.
SETUP = "uname -m > /etc/built-on"


def _spec(infra: str, name: str, base: str, platform: str, platforms: list[str]) -> str:
    template = {"base_image": base, "platform": platform, "command": ["sleep", "9999"], "limits": {"memory": "32MiB"},
                "snapshot": {"version": "1", "setup": [SETUP]}}
    data = yaml.safe_load(engine_spec(infra, {name: template}))
    data["hosts"]["local"]["platforms"] = platforms
    return spec_text(data)


def _machine(docker_client, deployment, pool: str) -> tuple[int, list[str], tuple[str, str]]:
    box = deployment.container(pool)
    code, out = sh(box, "uname -m; cat /etc/built-on")
    image = docker_client.images.get(box.attrs["Image"])
    return code, out.split(), (image.attrs["Os"], image.attrs["Architecture"])


@pytest.fixture(scope="module")
def amd64(debian_image, busybox_image, harness_sweep_orphans, tmp_path_factory):
    spec = _spec(debian_image, "amd", busybox_image, "linux/amd64", ["linux/amd64"])
    with shared_deployment(__file__, tmp_path_factory.mktemp("amd64"), spec) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def arm64(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    reason = emulation.arm64()
    if reason is not None:
        pytest.skip(f"linux/arm64 under emulation: {reason}")
    base = images.busybox_arm64_image(docker_client)
    spec = _spec(debian_image, "arm", base, "linux/arm64", ["linux/amd64", "linux/arm64"])
    with shared_deployment(__file__, tmp_path_factory.mktemp("arm64"), spec) as deployment:
        yield deployment


def test_a_linux_amd64_template_is_built_and_runs_as_amd64(amd64, docker_client):
    amd64.proves("RemoteImage.build.platform", "Container.platform")
    assert _machine(docker_client, amd64, "amd") == (0, ["x86_64", "x86_64"], ("linux", "amd64"))


def test_a_linux_arm64_template_is_built_and_runs_under_emulation(arm64, docker_client):
    arm64.proves("RemoteImage.build.platform", "Container.platform")
    assert _machine(docker_client, arm64, "arm") == (0, ["aarch64", "aarch64"], ("linux", "arm64"))

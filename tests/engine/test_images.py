"""The locally built test images run: the plumbing every engine test stands on."""

from __future__ import annotations

import pytest

from testbed import images


def _run(client, image: str, command: list[str], **kwargs) -> str:
    return client.containers.run(image, command, remove=True, network_mode="none", **kwargs).decode()


@pytest.mark.docker
def test_busybox_image_runs_shell_as_non_root_user(docker_client, busybox_image):
    out = _run(docker_client, busybox_image, ["sh", "-c", "echo hello; id -u; id -g"], user="sandbox")
    assert out.split() == ["hello", "1000", "1000"]


@pytest.mark.docker
def test_debian_image_has_python_squid_and_probe_tools(docker_client, debian_image):
    out = _run(docker_client, debian_image, ["bash", "-c",
               "python3 -c 'print(6 * 7)' && squid -v | head -n1 && "
               "command -v curl nc dig iptables ip6tables ip ps"])
    lines = out.splitlines()
    assert lines[0] == "42"
    assert lines[1].startswith("Squid Cache: Version")
    assert [line.rsplit("/", 1)[-1] for line in lines[2:]] == [
        "curl", "nc", "dig", "iptables", "ip6tables", "ip", "ps"]


def test_image_tags_change_with_the_recipe_only():
    same = images.Recipe("busybox", dict(images.BUSYBOX.fields))
    assert same.tag == images.BUSYBOX.tag
    assert images.BUSYBOX.tag.startswith("sandstack-test/busybox:")
    changed = images.Recipe("busybox", {**images.BUSYBOX.fields, "dockerfile": "FROM scratch\n"})
    assert changed.tag != images.BUSYBOX.tag

"""Fixtures for engine tests: the locally built test images (see testbed/images.py)."""

from __future__ import annotations

import pytest

from testbed import images


@pytest.fixture(scope="session")
def busybox_image(docker_client) -> str:
    """Tag of the busybox image (user `sandbox` 1000:1000; httpd, nslookup; nc is TCP-only, no -z/-u)."""
    return images.busybox_image(docker_client)


@pytest.fixture(scope="session")
def debian_image(docker_client) -> str:
    """Tag of the Debian image (squid, python3, iptables, iproute2, procps, curl, nc, dig)."""
    return images.debian_image(docker_client)


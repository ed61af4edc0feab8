"""HostsBackend without a daemon: how it names a host it cannot use, and that no secret reaches the message."""

from __future__ import annotations

import pytest

from testbed.harness.hosts_backend import HostsBackend, HostUnreachable
from testbed.provider.mocks import UnsupportedResourceError

PEM = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgsecretsecret\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def backend():
    made = HostsBackend("unit")
    yield made
    made.close()


def test_a_tls_host_without_all_its_material_is_named_and_no_material_printed(backend):
    backend.providers["p"] = {"host": "tcp://10.254.77.2:2376", "caMaterial": PEM, "keyMaterial": PEM}
    with pytest.raises(HostUnreachable) as failure:
        backend.provider_host("urn:r", "p")
    assert str(failure.value) == ("host tcp://10.254.77.2:2376: a tcp:// endpoint needs the provider's ca, cert and "
                                  "key material (missing: ['cert'])")


def test_a_socket_nobody_listens_on_is_named(backend, tmp_path):
    backend.providers["p"] = {"host": f"unix://{tmp_path}/docker.sock"}
    with pytest.raises(HostUnreachable) as failure:
        backend.provider_host("urn:r", "p")
    assert str(failure.value) == (f"host unix://{tmp_path}/docker.sock: the Docker daemon does not answer "
                                  "(DockerException: No such file)")


def test_a_provider_field_the_harness_does_not_map_is_refused(backend):
    backend.providers["p"] = {"host": "unix:///var/run/docker.sock", "registryAuth": [{"address": "r.test"}]}
    with pytest.raises(UnsupportedResourceError, match=r"also sets \['registryAuth'\]"):
        backend.provider_host("urn:r", "p")


PROVIDER = "urn:pulumi:s::sandstack::sandstack:index:SandboxHost$pulumi:providers:docker::sandstack-{}-provider::id-{}"


def test_a_run_names_every_unreachable_host_its_provider_and_what_it_left(backend, tmp_path):
    for name in ("b", "a"):
        backend.providers[PROVIDER.format(name, name)] = {"host": f"unix://{tmp_path}/{name}.sock"}
    for urn, name in (("urn:r1", "b"), ("urn:r2", "b"), ("urn:r3", "a")):
        with pytest.raises(HostUnreachable) as failure:
            backend.provider_host(urn, PROVIDER.format(name, name))
    assert str(failure.value) == (f"host unix://{tmp_path}/a.sock (provider sandstack-a-provider): the Docker daemon "
                                  "does not answer (DockerException: No such file)")
    first = HostUnreachable("the first registration's failure")
    assert str(backend.run_error(first)) == (
        f"2 hosts unreachable: host unix://{tmp_path}/a.sock (provider sandstack-a-provider): the Docker daemon does "
        f"not answer (DockerException: No such file) (1 resource left as they were); host unix://{tmp_path}/b.sock "
        "(provider sandstack-b-provider): the Docker daemon does not answer (DockerException: No such file) "
        "(2 resources left as they were)")
    backend.begin_run()  # the next run finds out again
    assert backend.run_error(first) is first

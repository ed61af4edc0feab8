"""SandboxHost's docker.Provider: endpoints, ssh options, TLS material from Pulumi secret config."""

from __future__ import annotations

import pulumi
import pytest

from sandstack.plan.host import host_address
from testbed.specs import LOCAL, host, spec

TEMPLATES = {"t": {"base_image": "busybox:1.36"}}
TLS = {"ca": {"secret": "gpuA.ca"}, "cert": {"secret": "gpuA.cert"}, "key": {"secret": "infra:clientKey"}}
TLS_SECRETS = {"sandstack:gpuA.ca": "CA PEM", "sandstack:gpuA.cert": "CERT PEM", "infra:clientKey": "KEY PEM"}


def _hosts(**endpoints) -> dict:
    return {name.replace("_", "-"): host(**value) for name, value in endpoints.items()}


def test_unix_socket_endpoint_sets_only_host(build):
    built = build(spec(TEMPLATES))
    provider = built.reg("sandstack-local-provider")
    assert provider.typ == "pulumi:providers:docker"
    assert provider.inputs == {"host": LOCAL}
    assert provider.secret_paths == frozenset()
    assert provider.request.parent == built.reg("sandstack-local").urn
    assert built.outputs_of("sandstack-local")["address"] == "localhost"


def test_ssh_endpoints_map_to_host_and_ssh_opts(build):
    hosts = _hosts(
        a={"endpoint": "ssh://deploy@sbx-a.example.com", "ssh_opts": ["-o", "StrictHostKeyChecking=yes"]},
        b={"endpoint": "ssh://deploy@sbx-b.example.com:2222"},
    )
    built = build(spec(TEMPLATES, pools={"t": {"template": "t", "hosts": ["a", "b"]}}, hosts=hosts))
    # Provider inputs travel as strings: Pulumi JSON-encodes the list for the provider to decode.
    assert built.reg("sandstack-a-provider").inputs == {"host": "ssh://deploy@sbx-a.example.com",
                                                        "sshOpts": '["-o", "StrictHostKeyChecking=yes"]'}
    assert built.reg("sandstack-b-provider").inputs == {"host": "ssh://deploy@sbx-b.example.com:2222"}
    assert built.outputs_of("sandstack-a")["address"] == "sbx-a.example.com"
    assert built.outputs_of("sandstack-b")["address"] == "sbx-b.example.com"


def test_tcp_tls_material_comes_from_secret_config_and_stays_secret(build):
    hosts = _hosts(gpu={"endpoint": "tcp://gpu-a.example.com:2376", "tls": TLS})
    built = build(spec(TEMPLATES, pools={"t": {"template": "t", "hosts": ["gpu"]}}, hosts=hosts),
                  secret_config=TLS_SECRETS)
    provider = built.reg("sandstack-gpu-provider")
    assert provider.inputs == {"host": "tcp://gpu-a.example.com:2376", "caMaterial": "CA PEM",
                               "certMaterial": "CERT PEM", "keyMaterial": "KEY PEM"}
    assert provider.secret_paths == frozenset({"caMaterial", "certMaterial", "keyMaterial"})
    assert built.outputs_of("sandstack-gpu")["address"] == "gpu-a.example.com"


@pytest.mark.parametrize("missing, key", [("sandstack:gpuA.cert", "sandstack:gpuA.cert"),
                                          ("infra:clientKey", "infra:clientKey")])
def test_a_missing_tls_secret_fails_with_pulumis_message_naming_the_key(build, missing, key):
    hosts = _hosts(gpu={"endpoint": "tcp://gpu-a.example.com:2376", "tls": TLS})
    secrets = {k: v for k, v in TLS_SECRETS.items() if k != missing}
    with pytest.raises(pulumi.ConfigMissingError) as failure:
        build(spec(TEMPLATES, pools={"t": {"template": "t", "hosts": ["gpu"]}}, hosts=hosts), secret_config=secrets)
    assert str(failure.value) == (f"Missing required configuration variable '{key}'\n"
                                  f"\tplease set a value using the command `pulumi config set --secret {key} <value>`")


@pytest.mark.parametrize("endpoint, address", [
    ("unix:///var/run/docker.sock", "localhost"),
    ("unix:///run/user/1000/docker.sock", "localhost"),
    ("ssh://deploy@host.example.com", "host.example.com"),
    ("ssh://deploy@host.example.com:2222", "host.example.com"),
    ("tcp://10.0.0.5:2376", "10.0.0.5"),
])
def test_host_address_is_where_clients_reach_published_ports(endpoint, address):
    assert host_address(endpoint) == address

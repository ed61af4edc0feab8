"""Port exposure on the wire, and the stack outputs consumers read (`pulumi stack output --json`)."""

from __future__ import annotations

from testbed.specs import host, spec

PORTS = [
    {"port": 8000, "exposure": "host", "name": "api"},
    {"port": 8080, "exposure": "public", "host_port": 18080, "name": "http"},
    {"port": 53, "protocol": "udp", "exposure": "public"},
    {"port": 53, "protocol": "tcp", "exposure": "host", "name": "dns"},
    {"port": 9000, "exposure": "none", "name": "internal"},
]
TEMPLATE = {"base_image": "busybox:1.36", "command": ["sleep", "infinity"], "ports": PORTS}


def test_exposure_binds_loopback_or_all_interfaces_and_none_is_not_published(build):
    c = build(spec({"web": TEMPLATE})).container("sandstack-web.local-0")
    assert c.inputs["ports"] == [
        {"internal": 8000, "ip": "127.0.0.1", "protocol": "tcp"},
        {"internal": 8080, "external": 18080, "ip": "0.0.0.0", "protocol": "tcp"},
        {"internal": 53, "ip": "0.0.0.0", "protocol": "udp"},
        {"internal": 53, "ip": "127.0.0.1", "protocol": "tcp"},
    ]
    assert c.plan.host["PortBindings"] == {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "0"}],
        "8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "18080"}],
        "53/udp": [{"HostIp": "0.0.0.0", "HostPort": "0"}],
        "53/tcp": [{"HostIp": "127.0.0.1", "HostPort": "0"}],
    }


def test_only_unpublished_ports_publish_nothing(build):
    template = {**TEMPLATE, "ports": [{"port": 9000, "exposure": "none"}]}
    c = build(spec({"web": template})).container("sandstack-web.local-0")
    assert c.inputs["ports"] == []
    assert "PortBindings" not in c.plan.host


def test_stack_outputs_list_every_sandbox_with_its_port_addresses(build):
    built = build(spec({"web": TEMPLATE, "plain": {"base_image": "busybox:1.37"}},
                       pools={"web": {"template": "web", "hosts": ["local"]},
                              "plain": {"template": "plain", "hosts": ["local"], "replicas": 2}}))
    c = built.container("sandstack-web.local-0")
    bound = {(p["internal"], p["protocol"]): p["external"] for p in c.outputs["ports"]}
    assert bound[(8080, "tcp")] == 18080 and len(set(bound.values())) == 4  # the others: random host ports
    web_image = built.reg("sandstack-web.local-image")
    plain_image = built.reg("sandstack-plain.local-image")
    assert built.sandboxes == [
        {"name": "local/web/0", "pool": "web", "template": "web", "host": "local",
         "container": "sandstack-t-web-0", "image": web_image.inputs["name"],
         "digest": web_image.inputs["triggers"]["digest"], "version": None, "egress": "deny-all",
         "network": "sandstack-t-web",
         "ports": [
             {"name": "api", "port": 8000, "protocol": "tcp", "exposure": "host",
              "address": f"127.0.0.1:{bound[(8000, 'tcp')]}"},
             {"name": "http", "port": 8080, "protocol": "tcp", "exposure": "public", "address": "localhost:18080"},
             {"name": None, "port": 53, "protocol": "udp", "exposure": "public",
              "address": f"localhost:{bound[(53, 'udp')]}"},
             {"name": "dns", "port": 53, "protocol": "tcp", "exposure": "host",
              "address": f"127.0.0.1:{bound[(53, 'tcp')]}"},
             {"name": "internal", "port": 9000, "protocol": "tcp", "exposure": "none", "address": None},
         ]},
    ] + [
        {"name": f"local/plain/{i}", "pool": "plain", "template": "plain", "host": "local",
         "container": f"sandstack-t-plain-{i}", "image": plain_image.inputs["name"],
         "digest": plain_image.inputs["triggers"]["digest"], "version": None, "egress": "deny-all",
         "network": "sandstack-t-plain", "ports": []}
        for i in range(2)
    ]


def test_public_addresses_use_the_remote_hosts_name_and_loopback_stays_loopback(build):
    hosts = {"edge": host("ssh://deploy@edge.example.com:2222")}
    built = build(spec({"web": TEMPLATE}, pools={"web": {"template": "web", "hosts": ["edge"]}}, hosts=hosts))
    ports = {(p["port"], p["protocol"]): p["address"] for p in built.sandboxes[0]["ports"]}
    assert ports[(8080, "tcp")] == "edge.example.com:18080"
    assert ports[(53, "udp")].startswith("edge.example.com:")
    assert ports[(8000, "tcp")].startswith("127.0.0.1:")
    assert ports[(9000, "tcp")] is None
    assert built.sandboxes[0]["name"] == "edge/web/0" and built.sandboxes[0]["host"] == "edge"


def test_outputs_carry_the_snapshot_version_and_egress_mode(build):
    template = {"base_image": "busybox:1.36", "snapshot": {"version": "2024.1"},
                "network": {"egress": "allow-list", "allow": ["example.com"]}}
    built = build(spec({"agent": template}))
    [sandbox] = built.sandboxes
    assert (sandbox["version"], sandbox["egress"]) == ("2024.1", "allow-list")
    assert sandbox["image"] == f"sandstack-t/agent:2024.1-{sandbox['digest'][:12]}"

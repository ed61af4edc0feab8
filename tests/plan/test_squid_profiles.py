"""A pool with network profiles in the gateway's squid.conf: every profile's lines, each under the external acl that
holds when the request's source is in that profile now, and the helper that answers it (run here with sh)."""

from __future__ import annotations

import subprocess

from sandstack.plan.gateway import ENTRYPOINT, PROFILE_HELPER_SH
from sandstack.plan.squid import PROFILES_DIR, GatewayPool, render
from sandstack.spec.egress import parse_entry
from sandstack.spec.resolve import EffectiveNetwork, envelope

OPEN = EffectiveNetwork("allow-list", (parse_entry("pypi.org"), parse_entry("*.pythonhosted.org")),
                        (parse_entry("bad.pypi.org"),), True)
LOCKED = EffectiveNetwork("deny-all", (), (), False)
SETUP = EffectiveNetwork("allow-list", (parse_entry("api.example.com:8443"),), (), True)
PROFILES = (("open", OPEN), ("locked", LOCKED), ("set-up", SETUP))
POOL = GatewayPool("agent-a", 31000, envelope(tuple(n for _, n in PROFILES)), "10.213.0.0/23", "10.213.1.254",
                   ("169.254.0.0/16",), "t-agent-a", PROFILES, "open")
UNLESS = "!sandstack_localhost !sandstack_self !agent_a_blocked"

PROFILE_LINES = [
    "",
    "# pool 'agent-a': egress allow-list, network profiles open, locked, set-up (start open)",
    "acl agent_a_src src 10.213.0.0/23",
    "note sandstack_pool agent-a agent_a_from",
    "http_access deny agent_a_from !agent_a_src",
    # CONNECT: 443 and every profile's named ports
    "acl agent_a_connect_port port 443 8443",
    "http_access deny agent_a_from sandstack_connect !agent_a_connect_port",
    "acl agent_a_blocked dst 169.254.0.0/16",
    "",
    "# pool 'agent-a', network profile 'open': egress allow-list",
    "acl agent_a-open external sandstack_profile agent-a open open",
    "acl agent_a-open_deny0 dstdomain -n .bad.pypi.org",
    "http_access deny agent_a_from agent_a-open agent_a-open_deny0",
    "acl agent_a-open_allow0 dstdomain -n pypi.org",
    "acl agent_a-open_allow0_port port 80 443",
    f"http_access allow agent_a_from agent_a-open agent_a-open_allow0 agent_a-open_allow0_port {UNLESS}",
    "acl agent_a-open_allow1 dstdomain -n .pythonhosted.org",
    "acl agent_a-open_allow1_apex dstdomain -n pythonhosted.org",
    "acl agent_a-open_allow1_port port 80 443",
    "http_access allow agent_a_from agent_a-open agent_a-open_allow1 !agent_a-open_allow1_apex "
    # A wildcard names no host: never a private address (docs/design/egress.md).
    f"agent_a-open_allow1_port {UNLESS} !sandstack_private",
    # deny-all: no line of its own; the final `deny all` refuses its requests (logged as TCP_DENIED)
    "",
    "# pool 'agent-a', network profile 'locked': egress deny-all",
    "acl agent_a-locked external sandstack_profile agent-a locked open",
    "",
    "# pool 'agent-a', network profile 'set-up': egress allow-list",
    "acl agent_a-set_up external sandstack_profile agent-a set-up open",
    "acl agent_a-set_up_allow0 dstdomain -n api.example.com",
    "acl agent_a-set_up_allow0_port port 8443",
    f"http_access allow agent_a_from agent_a-set_up agent_a-set_up_allow0 agent_a-set_up_allow0_port {UNLESS}",
]


def test_a_pool_with_profiles_has_each_profiles_lines_under_its_external_acl():
    lines = render("t", "h1", [POOL]).split("\n")
    assert "external_acl_type sandstack_profile ttl=0 negative_ttl=0 children-startup=1 children-max=8 %SRC " \
           "/bin/sh /tmp/sandstack-profile" in lines
    # After the shared acls, before the first http_access line.
    assert lines.index("acl sandstack_connect method CONNECT") < lines.index(
        next(line for line in lines if line.startswith("external_acl_type sandstack_profile"))) < lines.index(
        "http_access deny manager")
    start = lines.index("# pool 'agent-a': egress allow-list, network profiles open, locked, set-up (start open)") - 1
    assert lines[start:] == PROFILE_LINES + ["", "http_access deny all", ""]


def test_without_profiles_there_is_no_external_acl():
    plain = GatewayPool("agent-a", 31000, OPEN, "10.213.0.0/23", "10.213.1.254")
    assert "external_acl_type sandstack_profile" not in render("t", "h1", [plain])


def _helper(tmp_path, files: dict[str, str], requests: list[str]) -> list[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    script = PROFILE_HELPER_SH.replace(PROFILES_DIR, str(tmp_path))
    done = subprocess.run(["sh", "-c", script], input="".join(r + "\n" for r in requests), capture_output=True,
                          text=True, check=True, timeout=10)
    return done.stdout.splitlines()


def test_the_helper_answers_from_the_runtimes_file_else_the_start_profile(tmp_path):
    answers = _helper(tmp_path, {"10.213.0.5": "agent-a locked\n", "10.213.0.7": "", "10.213.0.8": "other locked\n"}, [
        "10.213.0.4 agent-a open open",  # no file: the start profile
        "10.213.0.4 agent-a locked open",
        "10.213.0.5 agent-a open open",  # switched to locked
        "10.213.0.5 agent-a locked open",
        "10.213.0.7 agent-a open open",  # an empty file: no profile holds (refused)
        "10.213.0.8 agent-a locked open",  # another pool's file: no profile of this pool holds
    ])
    assert answers == ["OK", "ERR", "ERR", "OK", "ERR", "ERR"]


def test_the_gateway_writes_the_helper_before_squid_starts():
    assert ENTRYPOINT.index("cat >/tmp/sandstack-profile <<'SANDSTACK_PROFILE'") < ENTRYPOINT.index("squid -N")
    assert PROFILE_HELPER_SH in ENTRYPOINT


# The host's plan: the gateway's pool and the runtime's configuration carry the profiles.

def test_the_host_plan_gives_the_gateway_and_the_runtime_the_templates_profiles(tmp_path):
    from sandstack.plan.host import plan_hosts
    from sandstack.plan.runtime import RuntimeConfig
    from sandstack.spec import load_stack
    from testbed.specs import host, spec, write_spec

    data = spec({"agent": {"base_image": "busybox:1.36", "network_profiles": {"start": "open", "profiles": {
        "open": {"egress": "allow-list", "allow": ["pypi.org"]}, "locked": {"egress": "deny-all"}}}},
        "plain": {"base_image": "busybox:1.36"}},
        hosts={"h": host(runtime={"token": {"secret": "runtimeToken"}})},
        pools={"agent": {"template": "agent", "hosts": ["h"]}, "plain": {"template": "plain", "hosts": ["h"]}})
    plan = plan_hosts(load_stack(write_spec(tmp_path, data)), "t")["h"]
    (pool,) = plan.gateway.pools
    assert (pool.pool, [n for n, _ in pool.profiles], pool.start) == ("agent", ["open", "locked"], "open")
    config = plan.runtime.config
    assert config.gateway == "sandstack-t_gateway"
    assert (config.pools["agent"].network_profiles, config.pools["agent"].start_profile) == (("open", "locked"), "open")
    assert RuntimeConfig.from_json(config.to_json()) == config
    # A pool without profiles writes no such keys (its runtime's configuration stays as it was).
    assert '"start_profile"' in config.to_json() and config.to_json().count('"start_profile"') == 1

"""A session's network profile over the API (fake backend): switched in place between its template's declared
profiles, refused for any other with nothing changed, audited, and back to the start profile when the session ends."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from sandstack.client import AsyncClient, Client, InvalidRequest, NetworkProfile, Retry
from tests.runtime.conftest import PY, TOKEN, make_config, make_env
from tests.runtime.served import serve

FAST = Retry(attempts=3, backoff=0.001, max_backoff=0.001)

GATEWAY = "sandstack-t_gateway"


def _env(tmp_path: Path):
    config = make_config()
    pools = dict(config.pools)
    pools["py"] = replace(pools["py"], network_profiles=("open", "locked"), start_profile="open")
    return make_env(tmp_path, replace(config, pools=pools, gateway=GATEWAY))


@pytest.fixture
def env(tmp_path: Path):
    environment = _env(tmp_path)
    yield environment
    environment.backend.close()


def _switch(env, session: str, profile: str, **headers):
    return env.api.post(f"/v1/sessions/{session}/network", json={"profile": profile}, headers=headers)


def test_a_switch_records_the_profile_at_the_gateway_and_answers_it(env):
    sandbox = env.claim("s1")["sandbox"]
    assert env.api.get("/v1/sessions/s1/network").json() == {
        "session": "s1", "sandbox": sandbox, "pool": "py", "profile": "open", "previous": None, "start": "open",
        "profiles": ["open", "locked"]}
    answer = _switch(env, "s1", "locked")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"session": "s1", "sandbox": sandbox, "pool": "py", "profile": "locked",
                             "previous": "open", "start": "open", "profiles": ["open", "locked"]}
    address = env.backend.addresses[sandbox]
    assert env.backend.profile_files == {GATEWAY: {address: "py locked"}}
    assert env.backend.profile_checks == ["py locked open"]  # the gateway's helper asked as squid asks it
    assert env.api.get("/v1/sessions/s1/network").json()["profile"] == "locked"
    # Back to the start profile: the record is removed (the helper's default is the start profile).
    assert _switch(env, "s1", "open").json()["previous"] == "locked"
    assert env.backend.profile_files == {GATEWAY: {}}


def test_an_undeclared_profile_is_refused_naming_the_declared_ones_and_nothing_changes(env):
    env.claim("s1")
    assert _switch(env, "s1", "locked").status_code == 200
    calls = len(env.backend.calls)
    answer = _switch(env, "s1", "wide-open")
    assert answer.status_code == 422
    assert answer.json() == {"error": "network profile 'wide-open' is not declared for pool 'py'; its profiles: "
                                      "open, locked", "pool": "py", "profile": "wide-open",
                             "profiles": ["open", "locked"]}
    assert env.backend.calls[calls:] == []
    assert env.api.get("/v1/sessions/s1/network").json()["profile"] == "locked"


def test_a_pool_without_profiles_refuses_a_switch(env):
    env.claim("w1", pool="web")
    answer = _switch(env, "w1", "open")
    assert answer.status_code == 409
    assert answer.json()["error"] == ("pool 'web' declares no network profiles: its template has one `network`, "
                                      "which no call changes")


def test_the_switch_is_audited_with_who_the_scope_and_both_profiles_never_the_token(env):
    claimed = env.claim("s1")
    # The session's own token may switch its own session, as it may call the session's other routes.
    answer = _switch(env, "s1", "locked", Authorization=f"Bearer {claimed['token']}",
                     **{"X-Sandstack-Actor": "agent-run-7"})
    assert answer.status_code == 200, answer.text
    _switch(env, "s1", "nope")
    lines = [line for line in env.audit.tail(50) if line["operation"] == "switch_network"]
    assert [(line["who"], line["session"], line["sandbox"], line["status"], line["outcome"]) for line in lines] == [
        ("agent-run-7@testclient", "s1", claimed["sandbox"], 200, "network profile open -> locked"),
        ("testclient", "s1", claimed["sandbox"], 422,
         "network profile 'nope' is not declared for pool 'py'; its profiles: open, locked")]
    assert lines[0]["scope"] != lines[1]["scope"] == "host"
    text = (env.state_dir / "audit.log").read_text()
    assert TOKEN not in text and claimed["token"] not in text


def test_a_released_sandbox_is_back_in_the_start_profile(env):
    sandbox = env.claim("s1")["sandbox"]
    _switch(env, "s1", "locked")
    assert env.api.delete("/v1/sessions/s1").status_code == 200
    assert env.backend.profile_files == {GATEWAY: {}}
    env.claim("s2")  # the same idle sandbox again
    assert env.api.get("/v1/sessions/s2/network").json()["profile"] == "open"
    assert sandbox in PY


def test_a_restarted_runtime_knows_the_profile_in_force(env):
    env.claim("s1")
    _switch(env, "s1", "locked")
    again = env.restarted()
    assert again.api.get("/v1/sessions/s1/network").json()["profile"] == "locked"


def test_a_switch_the_gateway_cannot_record_changes_nothing(env):
    env.claim("s1")
    env.backend.gateway_down = True
    answer = _switch(env, "s1", "locked")
    assert answer.status_code == 502
    assert "its network profile stays 'open'" in answer.json()["error"]
    env.backend.gateway_down = False
    assert env.api.get("/v1/sessions/s1/network").json()["profile"] == "open"
    assert env.backend.profile_files == {}


def test_a_hibernated_session_resumed_at_another_address_keeps_its_profile_there(env):
    sandbox = env.claim("s1")["sandbox"]
    _switch(env, "s1", "locked")
    old = env.backend.addresses[sandbox]
    assert env.api.post("/v1/sessions/s1/hibernate").status_code == 200
    env.backend.addresses[sandbox] = "10.213.1.88"  # the restarted container got another address
    assert env.api.post("/v1/sessions/s1/resume").status_code == 200
    assert env.backend.profile_files == {GATEWAY: {"10.213.1.88": "py locked"}}
    assert old not in env.backend.profile_files[GATEWAY]


def test_an_address_that_moved_drops_its_old_record(env):
    sandbox = env.claim("s1")["sandbox"]
    _switch(env, "s1", "locked")
    old = env.backend.addresses[sandbox]
    env.backend.addresses[sandbox] = "10.213.1.77"  # a restart gave it another address
    assert _switch(env, "s1", "locked").status_code == 200
    assert env.backend.profile_files == {GATEWAY: {"10.213.1.77": "py locked"}}
    assert old not in env.backend.profile_files[GATEWAY]


# The client's sync and async session handles, against the served runtime.

def _outputs(url: str) -> dict:
    return {"hosts": {"local": {"url": url, "token": TOKEN}}, "pools": {"py": ["local"], "web": ["local"]}}


def _sync(url: str) -> list:
    with Client.from_outputs(_outputs(url), retry=FAST) as client:
        sandbox = client.claim("py", "c1")
        seen = [sandbox.network(), sandbox.network("locked"), sandbox.network()]
        with pytest.raises(InvalidRequest) as refused:
            sandbox.network("wide")
        seen.append(str(refused.value))
        sandbox.release()
        return seen


async def _async(url: str) -> list:
    async with AsyncClient.from_outputs(_outputs(url), retry=FAST) as client:
        sandbox = await client.claim("py", "c1")
        seen = [await sandbox.network(), await sandbox.network("locked"), await sandbox.network()]
        with pytest.raises(InvalidRequest) as refused:
            await sandbox.network("wide")
        seen.append(str(refused.value))
        await sandbox.release()
        return seen


def test_the_sync_and_async_session_handles_read_and_switch_the_profile(env):
    with serve(env.api.app) as url:
        for seen in (_sync(url), asyncio.run(_async(url))):
            first, switched, now, refused = seen
            assert isinstance(first, NetworkProfile)
            assert (first.profile, first.start, first.profiles, first.previous) == ("open", "open", ["open", "locked"],
                                                                                  None)
            assert (switched.profile, switched.previous, switched.pool) == ("locked", "open", "py")
            assert now.profile == "locked"
            assert "network profile 'wide' is not declared for pool 'py'; its profiles: open, locked" in refused
            assert env.backend.profile_files == {GATEWAY: {}}  # released: back to the start profile


def test_the_record_script_writes_whole_asks_the_gateways_helper_and_removes(tmp_path):
    """SET_PROFILE as the gateway runs it (sh), on this machine's paths: the record, then the helper's answer."""
    import subprocess

    from sandstack.plan.gateway import PROFILE_HELPER_SH
    from sandstack.plan.squid import PROFILES_DIR
    from sandstack.runtime.scripts import SET_PROFILE
    from sandstack.spec.contract import PROFILE_HELPER

    records, helper = tmp_path / "profiles", tmp_path / "helper.sh"
    helper.write_text(PROFILE_HELPER_SH.replace(PROFILES_DIR, str(records)))
    script = SET_PROFILE.replace(PROFILES_DIR, str(records)).replace(PROFILE_HELPER, str(helper))

    def run(*args: str) -> tuple[int, str]:
        done = subprocess.run(["sh", "-c", script, "sandstack-profile", *args], capture_output=True, text=True,
                              timeout=10)
        return done.returncode, done.stdout

    assert run("10.213.0.5", "py locked", "py locked open") == (0, "")
    assert (records / "10.213.0.5").read_text() == "py locked\n"
    assert sorted(p.name for p in records.iterdir()) == ["10.213.0.5"]  # no temporary file left
    # A check the helper does not confirm fails the call (the runtime answers 502, keeping its own record).
    assert run("10.213.0.5", "py locked", "py open open") == (
        3, "the gateway's profile helper answers 'ERR' for 10.213.0.5 py open open\n")
    assert run("10.213.0.5", "", "py open open") == (0, "")
    assert not (records / "10.213.0.5").exists()

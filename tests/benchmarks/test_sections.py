"""Section selection, and the rule that the sections without Docker import nothing from `tests`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.context import REPO
from benchmarks.sections import SECTIONS, WITHOUT_DOCKER, select


def test_only_selects_in_run_order():
    assert [s.name for s in select("check,validate")] == ["validate", "check"]
    assert [s.name for s in select(None)] == list(SECTIONS)


def test_only_refuses_unknown_names_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown section.*nope.*known: validate"):
        select("validate,nope")


def test_docker_sections_are_the_engine_items():
    assert [s.name for s in SECTIONS.values() if s.docker] == ["start", "gateway", "deploy", "runtime", "ondemand",
                                                               "concurrency", "hosts", "streams", "live", "sizes",
                                                               "ssh", "snapstore"]


def test_non_docker_sections_import_nothing_from_tests():
    code = ("import sys\n"
            f"for name in {WITHOUT_DOCKER!r}:\n"
            "    __import__(f'benchmarks.sections.{name}')\n"
            "import benchmarks.__main__, benchmarks.mock_program, benchmarks.profile\n"
            "print(sorted(m for m in sys.modules if m == 'tests' or m.startswith('tests.')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_section_has_a_title_and_a_run_function():
    for section in SECTIONS.values():
        module = section.module()
        assert module.TITLE and callable(module.run)


def test_mock_program_registers_one_container_per_sandbox_plus_guard_gateway_and_logger(tmp_path):
    import json

    from benchmarks import stacks

    spec, _ = stacks.write_pair(stacks.SIZES["10"], tmp_path)
    out = subprocess.run([sys.executable, "-m", "benchmarks.mock_program", str(spec)], cwd=REPO,
                         capture_output=True, text=True, check=True)
    counts = json.loads(out.stdout.splitlines()[-1])
    # and the guard, the gateway, the logging resolvers, each with its reload container (docs/design/live-changes.md)
    assert counts["by_type"]["Container"] == 10 + 3 + 3
    assert counts["registrations"] == sum(counts["by_type"].values())


def test_profile_runs_a_module_command_as_a_module_and_a_script_as_a_script(tmp_path):
    from benchmarks.profile import pyinstrument_argv

    session = tmp_path / "p.pyisession"
    assert pyinstrument_argv([sys.executable, "-m", "benchmarks.mock_program", "x.yaml"], session)[-3:] == [
        "-m", "benchmarks.mock_program", "x.yaml"]
    assert pyinstrument_argv(["/venv/bin/sandstack", "preview", "x.yaml"], session)[-3:] == [
        "/venv/bin/sandstack", "preview", "x.yaml"]


def test_profiled_command_is_shown_without_temporary_paths():
    from benchmarks.profile import display

    assert display(["/venv/bin/sandstack", "validate", "/tmp/x/stack-10.yaml"]) == "sandstack validate stack-10.yaml"


def test_the_ondemand_section_reads_the_place_body_from_the_configuration_set_in_force():
    """It read a configuration file the runtime no longer has (ImportError: the set `want` points at replaced it)."""
    from benchmarks.sections.ondemand import _slot_body
    from sandstack.plan.runtime import ENV_CONFIG_TEXT
    from sandstack.spec.contract import CONFIG_DIR, CONFIG_WANT
    from tests.runtime.ondemand_helpers import PLACES, od_config

    config = od_config()
    pools = {"agent": config.pools["od"]}
    text = type(config)(host=config.host, pools=pools, ondemand_labels=config.ondemand_labels).to_json()
    read: list[list[str]] = []

    class Runtime:
        def exec_run(self, argv):
            read.append(argv)
            return type("Result", (), {"output": text.encode()})()

    class Docker:
        containers = type("Containers", (), {"get": staticmethod(lambda name: Runtime())})()

    deployment = type("Deployment", (), {"name": staticmethod(lambda what: f"stack_{what}")})()
    assert _slot_body(Docker(), deployment) == pools["agent"].ondemand.body(PLACES[0])
    assert read == [["cat", f"{CONFIG_DIR}/{CONFIG_WANT}/{ENV_CONFIG_TEXT}"]]


def test_the_concurrency_sections_client_never_closes_a_connection_to_make_room(monkeypatch):
    """httpx's default pool (100 connections, 20 kept) trims connections, which in httpcore 1.0.9's sync pool can close
    one already handed to a waiting thread (encode/httpcore#1110): a warm hit of each burst waited its 300 s timeout."""
    import httpx

    from benchmarks.sections.concurrency import _http
    from sandstack.client.endpoints import HostEndpoint

    monkeypatch.setattr(httpx, "Client", lambda **options: options)
    options = _http(HostEndpoint("local", "http://127.0.0.1:1", "t" * 32), 300, {"Authorization": "Bearer t"})
    assert options == {"base_url": "http://127.0.0.1:1", "headers": {"Authorization": "Bearer t"}, "timeout": 300,
                       "limits": httpx.Limits(max_connections=None, max_keepalive_connections=None)}


def test_the_ondemand_section_waits_for_the_runtime_to_answer_before_its_first_claim(monkeypatch):
    from benchmarks.sections import ondemand
    from sandstack.client import HostUnavailable

    calls = []

    class Host:
        def pools(self):
            calls.append("pools")
            if calls.count("pools") < 3:
                raise HostUnavailable(503, "local: does not answer (ConnectError)", {})
            return []

    monkeypatch.setattr(ondemand.time, "sleep", lambda seconds: calls.append(f"sleep {seconds}"))
    ondemand._wait_answers(Host(), timeout=60)
    assert calls == ["pools", "sleep 0.5", "pools", "sleep 0.5", "pools"]


def test_the_check_section_passes_policy_files_only():
    # The check section failed at once (exit 2, "$.rules: required field") when the example price list joined them.
    from benchmarks.context import POLICIES
    from sandstack.policy.org import load_policy_file

    assert POLICIES and all(load_policy_file(path) for path in POLICIES)

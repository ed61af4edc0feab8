"""Schemathesis against the committed OpenAPI document (docs/runtime-openapi.json), in-process on the ASGI app
over the fake backend: generated valid and invalid requests to every operation must get no 5xx and no answer
the document does not describe (status code, content type, body schema).

Bounded: a fixed number of examples per operation and mode, a per-example deadline, a derandomized (seeded)
run with no example database, so it takes the same few seconds every time. Each operation runs twice: once
with every parameter generated, once on a bound sandbox, its session and a process of it, so exec, files,
snapshots, pause, processes and watches are exercised beyond their 404s. Commands the API runs for a caller are replaced by `printf` of their argv:
generated scripts must not run on this machine, while the runtime's own file scripts (which take generated
paths as data) run for real.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sandstack.runtime.openapi import PATH
from tests.runtime.conftest import PY, TOKEN, hk, make_env
from tests.runtime.fake_backend import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 8  # per operation, per mode, per run
DEADLINE = timedelta(seconds=5)  # per example: generous for a busy 2-core machine
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROCESS = "proc-0123456789abcdef"  # a process of the bound session (_bound_again)


class EchoBackend(FakeBackend):
    """The fake backend, but a caller's command prints its argv instead of running."""

    def exec(self, name, argv, **kwargs):
        own = argv[:2] == ["sh", "-c"] and argv[3:4] == ["sandstack"]
        return super().exec(name, argv if own else ["printf", "%s\\n", *argv], **kwargs)

    def spawn(self, name, argv, **kwargs):  # blocking exec and processes
        return super().spawn(name, ["printf", "%s\\n", *argv], **kwargs)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    environment = make_env(tmp_path_factory.mktemp("schemathesis"))
    environment.backend.__class__ = EchoBackend
    yield environment
    environment.backend.close()
    environment.audit.close()


def operations():
    raw = json.loads((ROOT / PATH).read_text(encoding="utf-8"))
    schema = schemathesis.openapi.from_dict(raw)
    return [result.ok() for result in schema.get_all_operations()]


def _bound_again(env) -> None:
    """The fixed sandbox back to bound to session 'fuzz' after whatever the last example did to it, with a process
    of that session under the fixed id PROCESS (so the process routes are exercised beyond their 404s)."""
    row = env.runtime.sandbox(PY[0])
    if row.status == "paused":
        env.runtime.sandboxes.resume(PY[0])
    elif row.session != hk("fuzz"):
        if row.session is not None:
            env.runtime.sessions.release(row.session)
        env.runtime.claim("py", "fuzz")
    processes = env.runtime.processes
    known = processes._procs.get(PROCESS)
    if known is None or known.session != hk("fuzz"):
        cmd = processes.command(PY[0], command=["cat"], script=None, lang="bash", cwd=None, env={})
        proc = processes.spawn(PY[0], cmd, limit=1000, stdin=True)
        with processes._lock:
            processes._procs[PROCESS] = processes._procs.pop(proc.id)
            proc.id = PROCESS


@pytest.mark.parametrize("operation", operations(), ids=lambda op: op.label)
def test_the_api_answers_as_its_committed_document_says(env, operation):
    fixed = {name: value for name, value in (("sandbox", PY[0]), ("session", "fuzz"), ("process", PROCESS))
             if f"{{{name}}}" in operation.path}
    runs = [None, fixed] if fixed else [None]  # every parameter generated; then on the bound sandbox
    # An operation without parameters or body has no invalid request to generate.
    modes = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if operation.path != "/healthz" else [])
    for mode in modes:
        for path_parameters in runs:
            @settings(max_examples=EXAMPLES, deadline=DEADLINE, derandomize=True, database=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(mode, path_parameters=path_parameters))
            def run(case):
                _bound_again(env)
                response = case.call(headers=AUTH, app=env.api.app)
                case.validate_response(response, checks=CHECKS)

            run()

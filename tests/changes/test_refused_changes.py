"""A change the rules refuse is answered with its located error and changes nothing: the second `pulumi up` of the
refused spec registers, replaces and deletes nothing (issue 39: "a platform no host offers", an environment that
refers to a public host name no ingress gives)."""

from __future__ import annotations

import copy

import pytest

from sandstack.spec.errors import SpecError
from testbed.harness.harness import Harness
from testbed.specs import changed, spec, stack_program, write_spec

CASES = [
    ("templates.t.platform", "linux/arm64",
     "18:7: $.pools.t.hosts[0]: pool 't' places template 't' (platform 'linux/arm64') on host 'local', which offers "
     "'linux/amd64' only; no host of the stack offers it: add it to `hosts.local.platforms` if that host runs it "
     "(natively or under emulation), or build the template for 'linux/amd64'"),
    ("templates.t.env", {"ORIGIN": "https://${SANDSTACK_PUBLIC_HOSTNAME}"},
     "14:15: $.templates.t.env.ORIGIN: `${SANDSTACK_PUBLIC_HOSTNAME}` in `ORIGIN` (template 't') needs the public "
     "host name an ingress gives, but pool 't' runs on host 'local', which declares no `ingress`: declare "
     "`hosts.local.ingress` or remove the reference"),
    ("templates.t.env", {"ORIGIN": "https://${SANDSTACK_URL_WEB}"},
     "14:15: $.templates.t.env.ORIGIN: `${SANDSTACK_URL_WEB}` in `ORIGIN` names no variable sandstack gives template "
     "'t''s sandboxes (it has no `exposure: url` port, so no SANDSTACK_URL_…); use one of "
     "`${SANDSTACK_PUBLIC_HOSTNAME}` (`$${…}` for the literal text)"),
]


@pytest.mark.parametrize(("field", "value", "error"), CASES, ids=["platform", "public-hostname", "unknown-url"])
def test_a_refused_change_changes_nothing(tmp_path, field, value, error):
    data = spec({"t": {"base_image": "busybox:1.36"}})
    harness = Harness.dry()
    harness.run(stack_program(write_spec(tmp_path, data)))
    before = copy.deepcopy(harness.state.entries)
    path = write_spec(tmp_path, changed(data, field, value))
    result = harness.run(stack_program(path), check=False)
    assert isinstance(result.error, SpecError)
    assert [d.text() for d in result.error.diagnostics] == [f"{path}:{error}"]
    assert result.actions == [] and harness.state.entries == before

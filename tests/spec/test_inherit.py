"""`extends` and the defaults' base image and snapshot: what a template inherits, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.spec import SpecError, load_stack
from testbed.specs import spec, write_spec

PARENT = {"base_image": "python:3.12-slim", "snapshot": {"version": "1", "setup": ["pip install requests"]},
          "limits": {"cpus": 2, "memory": "1GiB"}, "lifecycle": {"max_lifetime": "2h", "idle_timeout": "10m"},
          "env": {"A": "1", "B": "2"}, "network": {"egress": "allow-list", "allow": ["example.com"]},
          "description": "the parent"}


def _load(tmp_path: Path, templates: dict, **extra):
    return load_stack(write_spec(tmp_path, spec(templates, **extra)))


def test_a_child_inherits_what_it_does_not_set_and_merges_blocks_field_by_field(tmp_path):
    child = {"extends": "parent", "limits": {"cpus": 1}, "lifecycle": {"idle_timeout": "5m"}, "env": {"B": "3"}}
    stack = _load(tmp_path, {"parent": PARENT, "child": child})
    c = stack.templates["child"]
    assert (c.base_image, c.snapshot_version, c.setup) == ("python:3.12-slim", "1", ("pip install requests",))
    assert (c.limits.cpus, c.limits.memory) == (1, 512 * 1024**2)  # `limits` is taken whole: memory is built-in
    assert (c.lifecycle.max_lifetime, c.lifecycle.idle_timeout) == (7200, 300)  # merged field by field
    assert c.env == {"A": "1", "B": "3"}
    assert [str(a) for a in c.network.allow] == ["example.com"] and c.description == ""


def test_a_chain_of_extends_and_the_defaults_base_image_and_snapshot(tmp_path):
    defaults = {"base_image": "busybox:1.36", "snapshot": {"version": "7", "setup": ["true"]}}
    stack = _load(tmp_path, {"a": {}, "b": {"extends": "a", "limits": {"cpus": 3}}, "c": {"extends": "b"}},
                  defaults=defaults)
    for name in "abc":
        assert (stack.templates[name].base_image, stack.templates[name].snapshot_version) == ("busybox:1.36", "7")
    assert stack.templates["c"].limits.cpus == 3


@pytest.mark.parametrize(("templates", "message"), [
    ({"a": {"base_image": "busybox:1.36", "extends": "nope"}},
     "$.templates.a.extends: unknown template 'nope'; templates: a"),
    ({"a": {"base_image": "busybox:1.36", "extends": "b"}, "b": {"extends": "a"}},
     "$.templates.a.extends: `extends` goes round in a circle: a → b → a"),
])
def test_unknown_parents_and_cycles_are_located_errors(tmp_path, templates, message):
    with pytest.raises(SpecError) as error:
        _load(tmp_path, templates)
    assert message in str(error.value)

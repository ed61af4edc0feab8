"""Where an unset template field's value comes from (issue 38, item 7): each layer resolution applies, in its
order, named in the "because" line with the value it resolved to."""

from __future__ import annotations

import pytest

from sandstack.review.origin import origin
from sandstack.spec.models import Stack
from sandstack.spec.units import GIB, MIB

STACK = Stack.model_validate({
    "version": 1,
    "hosts": {"h": {"endpoint": "unix:///var/run/docker.sock", "capacity": {"cpus": 8, "memory": "16GiB",
                                                                          "disk": "100GiB"}}},
    "profiles": {"small": {"cpus": 0.5, "memory": "256MiB"}, "big": {"memory": "4GiB", "pids": 1024}},
    "defaults": {"limits": "small", "user": "1000:1000", "lifecycle": {"idle_timeout": "30m"}},
    "templates": {
        "base": {"base_image": "python:3.12-slim", "limits": {"profile": "big", "cpus": 2}, "runtime": "runsc"},
        "child": {"extends": "base", "command": ["sleep", "infinity"]},
        "own": {"base_image": "busybox:1.36", "limits": {"disk": "2GiB"}},
        "bare": {"base_image": "busybox:1.36"},
    },
    "pools": {},
})


@pytest.mark.parametrize(("path", "expected"), [
    ("templates.base.limits.memory", (4 * GIB, "profiles.big.memory")),  # its own limits' profile
    ("templates.base.limits.cpus", (2.0, "templates.base.limits.cpus")),  # its own (the diff asks only when unset)
    ("templates.child.limits.cpus", (2.0, "templates.base.limits.cpus")),  # the template it extends
    ("templates.child.limits.pids", (1024, "profiles.big.pids")),  # through the parent's profile
    ("templates.child.runtime", ("runsc", "templates.base.runtime")),
    ("templates.own.limits.memory", (256 * MIB, "profiles.small.memory")),  # the defaults' profile
    ("templates.own.limits.pids", (256, "the built-in default")),
    ("templates.bare.user", ("1000:1000", "defaults.user")),
    ("templates.bare.lifecycle.idle_timeout", (1800, "defaults.lifecycle.idle_timeout")),
    ("templates.bare.lifecycle.max_lifetime", (24 * 3600, "the built-in default")),
    ("templates.bare.filesystem.shm_size", None),  # follows the memory: no fixed built-in claimed
    ("pools.x.replicas", None),  # not a template's field
])
def test_an_unset_fields_value_and_where_it_comes_from(path: str, expected):
    assert origin(STACK, path) == expected

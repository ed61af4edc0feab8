"""How a setting's value reads in the diff (sandstack.review.show): spec units, short digests, ports, no reprs."""

from __future__ import annotations

import pytest

from sandstack.review.accept import Acceptance
from sandstack.review.show import value

DIGEST = "89e64fc1f8d5c6a27524a0cd9bcbf10b911acdd7148fc90e8237a78f72a1252a"


@pytest.mark.parametrize("key, raw, shown", [
    ("templates.python.limits.memory", 2147483648, "2GiB"),
    ("memory_mb", 1536, "1536MiB"),  # the largest unit that shows it exactly
    ("templates.python.limits.cpus", 1.0, "1 cpu"),
    ("cpus", "2", "2 cpus"),
    ("nano_cpus", 500_000_000, "0.5 cpus"),
    ("templates.python.lifecycle.idle_timeout", 1800, "30m"),
    ("digest", DIGEST, "sha256:89e64fc1f8d5…"),
    ("labels", {"sandstack.digest": f"sha256:{DIGEST}"}, "{sandstack.digest=sha256:89e64fc1f8d5…}"),
    ("ports", [{"internal": 8080, "external": 18080, "ip": "0.0.0.0", "protocol": "tcp"}], "[0.0.0.0:18080→8080/tcp]"),
    ("templates.preview.ports.1", {"port": 8081, "exposure": "public", "host_port": 18081, "name": "docs"},
     "8081/tcp public (host 18081, docs)"),
    ("env", {"TOKEN": {"secret": "apiToken"}}, "{TOKEN=<secret apiToken>}"),
    ("read_only", False, "false"),
    ("replicas", None, "(unset)"),
    ("command", "x" * 300, "x" * 300),  # shown whole, never cut at a width
])
def test_a_value_reads_in_the_spec_s_units(key, raw, shown):
    assert value(key, raw) == shown


@pytest.mark.parametrize("pattern, path, matches", [
    ("templates.python.network.allow", "templates.python.network.allow", True),
    ("templates.*.network.allow", "templates.python.network.allow", True),
    ("templates.python", "templates.python.limits.memory", True),  # a path matches its fields
    ("templates.python.limits", "templates.pythonic.limits.memory", False),
    ("templates.python.limits.memory", "templates.python.limits", False),
])
def test_an_acceptance_matches_a_path_part_by_part(pattern, path, matches):
    assert Acceptance(pattern, "disruption", "reviewed").matches(path) is matches

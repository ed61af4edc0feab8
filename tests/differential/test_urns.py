"""A stack deployed before the StackPlan move is not replaced by it: the program's URNs today are the URNs the program
registered before (tests/plan/fixtures/urns-before-stackplan/, written by testbed/urns.py from commit 5c3c1f5), one
to one, each either unchanged or through one of the new resource's Pulumi aliases."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from sandstack.spec.roles import HOST_ROLES
from testbed.urns import lines

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "plan" / "fixtures" / "urns-before-stackplan"
STACKS = sorted(p.stem for p in FIXTURES.glob("*.txt"))


def _fixture(stack: str) -> tuple[str, set[str]]:
    """(the stack file's sha256 the fixture was made from, the old URNs)."""
    text = (FIXTURES / f"{stack}.txt").read_text().splitlines()
    digest = next(line.rsplit(" ", 1)[-1] for line in text if line.startswith(f"# stacks/{stack}.yaml sha256 "))
    return digest, {line for line in text if line and not line.startswith("#")}


def _current(stack: str) -> dict[str, list[str]]:
    """URN → aliases, from `python -m testbed.urns` (its own process: it sets the mocks and config globally)."""
    out = subprocess.run([sys.executable, "-m", "testbed.urns", f"stacks/{stack}.yaml"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    urns = {}
    for line in out.splitlines():
        urn, _, aliases = line.partition(" <- ")
        urns[urn] = aliases.split()
    return urns


def matches(old: set[str], new: dict[str, list[str]]) -> tuple[dict[str, str], list[str]]:
    """(old URN → the new URN that is it or has it as an alias, problems)."""
    found: dict[str, str] = {}
    problems = []
    for urn in sorted(old):
        claimants = [n for n, aliases in new.items() if n == urn or urn in aliases]
        if len(claimants) != 1:
            problems.append(f"old {urn}: {len(claimants)} current resources are it or alias it {claimants}")
        else:
            found[urn] = claimants[0]
    taken: dict[str, str] = {}
    for urn, claimant in found.items():
        if claimant in taken:
            problems.append(f"current {claimant} claims two old resources: {taken[claimant]} and {urn}")
        taken[claimant] = urn
    return found, problems


def _config_part(urn: str) -> bool:
    name = urn.rsplit("::", 1)[-1]
    return any(part.config and name.endswith(f"-{part.name}") for role in HOST_ROLES.values() for part in role.parts)


def test_fixtures_cover_every_committed_stack():
    assert STACKS == sorted(p.stem for p in (REPO / "stacks").glob("*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_the_program_keeps_every_urn_of_the_program_before_the_stackplan_move(stack):
    digest, old = _fixture(stack)
    new = _current(stack)
    found, problems = matches(old, new)
    assert problems == []
    if hashlib.sha256((REPO / "stacks" / f"{stack}.yaml").read_bytes()).hexdigest() == digest:
        # The same spec: nothing more and nothing less than before (a changed spec may add resources), but what host
        # roles gained since to take their configuration in place (a configuration volume and a reload container).
        assert sorted(u for u in set(new) - set(found.values()) if not _config_part(u)) == []
    assert len(found) == len(old) > 0


def test_a_renamed_resource_matches_only_through_its_alias():
    old = {"a$b::x", "a$b::y"}
    assert matches(old, {"a$b::x": [], "a$b::y2": ["a$b::y"]}) == ({"a$b::x": "a$b::x", "a$b::y": "a$b::y2"}, [])
    _, problems = matches(old, {"a$b::x": [], "a$b::y2": []})
    assert problems == ["old a$b::y: 0 current resources are it or alias it []"]
    _, problems = matches(old, {"a$b::z": ["a$b::x", "a$b::y"]})
    assert problems == ["current a$b::z claims two old resources: a$b::x and a$b::y"]


def test_lines_show_aliases_after_the_urn():
    assert lines({"t::b": [], "t::a": ["t::old"]}) == ["t::a <- t::old", "t::b"]

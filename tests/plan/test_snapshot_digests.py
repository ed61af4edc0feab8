"""A stack's plan reads and hashes each template's snapshot inputs (its files, the supervisor) once, not once per
placement of it (3,000 times for a 1,000-sandbox stack), and the next plan reads them again (they may change)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sandstack.plan import snapshot
from sandstack.plan.stack import plan_stack
from sandstack.spec import load_stack

PROD = Path(__file__).parents[2] / "stacks" / "prod.yaml"


def test_each_templates_snapshot_inputs_are_read_once_per_plan(monkeypatch):
    spec = load_stack(PROD)
    calls: Counter[str] = Counter()
    real = snapshot.build_inputs

    def counted(template):
        calls[template.name] += 1
        return real(template)

    monkeypatch.setattr(snapshot, "build_inputs", counted)
    whole = plan_stack(spec, "prod")
    placed = {pool.template for pool in spec.pools.values()}
    assert sum(len(pool.hosts) for pool in spec.pools.values()) > len(placed)  # a template placed more than once
    assert calls == Counter(dict.fromkeys(placed, 1))
    again = plan_stack(spec, "prod")
    assert calls == Counter(dict.fromkeys(placed, 2))
    assert again.nodes == whole.nodes
    monkeypatch.undo()
    # The same snapshots as planned one by one, outside a plan (no cache); nothing held after a plan.
    assert whole.snapshots and all(plan == snapshot.plan_snapshot(whole.build_contexts[key], "prod")
                                   for key, plan in whole.snapshots.items() if key in whole.build_contexts)
    assert snapshot._DIGESTS.get() is None

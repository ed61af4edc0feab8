"""The package's provider table (sandstack.plan.provider_table) is the testbed's provider model, field by field."""

from __future__ import annotations

from sandstack.plan.provider_table import REPLACE, STATE_ONLY, TABLE, UPDATE, change_of
from testbed.provider import schema
from testbed.provider.tables import MAPPINGS


def test_the_table_has_every_mapped_type_and_field_with_the_models_change():
    assert set(TABLE) == set(MAPPINGS)
    for token, mapping in MAPPINGS.items():
        modes = {schema.REPLACE: REPLACE, schema.UPDATE: UPDATE, schema.STATE_ONLY: STATE_ONLY}
        assert {f.name: change_of(token, f.name) for f in mapping.fields} == \
            {f.name: modes[f.change] for f in mapping.fields}, token


def test_known_entries():
    container = "docker:index/container:Container"
    assert (change_of(container, "image"), change_of(container, "memory"), change_of(container, "tmpfs")) == \
        ("replace", "update", "state-only")
    assert change_of("docker:index/volume:Volume", "labels") == "replace"

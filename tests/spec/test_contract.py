"""Numbers other layers implement (host guard, gateway, sandbox container) come from one spec constant each,
and the generated reference quotes exactly those numbers."""

from __future__ import annotations

import pytest

from sandstack.spec import models
from sandstack.spec.models import Lifecycle
from sandstack.spec.models.base import change_of
from sandstack.spec.models.limits import CRASH_RETRIES, EXIT_IDLE, EXIT_LIFETIME, IDLE_CPU_MS_PER_S


def test_lifecycle_contract_numbers() -> None:
    assert (EXIT_LIFETIME, EXIT_IDLE, CRASH_RETRIES, IDLE_CPU_MS_PER_S) == (124, 123, 3, 20)


def test_lifecycle_descriptions_quote_the_contract() -> None:
    fields = Lifecycle.model_fields
    assert "host guard" in (Lifecycle.__doc__ or "") and "supervisor" not in (Lifecycle.__doc__ or "")
    assert "counted from its first start" in fields["max_lifetime"].description
    assert f"less than {IDLE_CPU_MS_PER_S} ms of CPU per second (readiness probes excluded)" in (
        fields["idle_timeout"].description)
    on_expiry = fields["on_expiry"].description
    assert f"exit status {EXIT_LIFETIME} (max lifetime reached) or {EXIT_IDLE} (idle timeout reached)" in on_expiry
    assert f"at most {CRASH_RETRIES} times (Docker's on-failure:{CRASH_RETRIES})" in on_expiry


@pytest.mark.parametrize(("model", "name", "change"), [
    ("NetworkPolicy", "allow_metadata", "gateway + guard; unlogged allow-all: guard"),  # squid.conf and guard rules
    ("Filesystem", "shm_size", "replace"),
    ("WritablePath", "exec", "replace; a disk workspace: replace + new workspaces + guard"),
    ("Limits", "open_files", "replace"),  # ulimits are not updated in place by the provider
])
def test_hardening_fields_declare_their_change_effect(model: str, name: str, change: str) -> None:
    info = getattr(models, model).model_fields[name]
    assert change_of(info).label == change

"""Engine harness: a TEST STAND-IN for the pulumi-docker provider, not product code.

We cannot run `pulumi up` here (no Pulumi CLI, no provider plugin). The harness runs a Pulumi program
in-process under `pulumi.runtime` mocks and applies each registered pulumi-docker resource
(Container, Network, Volume, RemoteImage) to the local Docker daemon with the Docker SDK for Python,
mirroring what terraform-provider-docker v4.5.0 (pulumi-docker 5.2's upstream) would do, and returns
the real computed outputs. A state keyed by URN makes successive runs behave like successive
`pulumi up`s (same / update / replace / delete). Unmapped resource types and input fields are refused.

Public API (see README.md beside this file):
    Harness, RunResult, Action                 -- harness.py / state.py
    docker_harness, dry_harness, recording_mocks fixtures -- fixtures.py
    RecordingMocks, run_program, install_mocks -- testbed/provider/mocks.py
    MAPPINGS (the field tables)                -- tables.py
"""

from __future__ import annotations

__all__ = ["Harness", "RunResult", "Action", "MAPPINGS"]


def __getattr__(name: str):
    # Lazy, so the dry recording mocks can import the tables without loading the Docker backend.
    if name in ("Harness", "RunResult"):
        from testbed.harness import harness
        return getattr(harness, name)
    if name == "Action":
        from testbed.harness.state import Action
        return Action
    if name == "MAPPINGS":
        from testbed.provider.tables import MAPPINGS
        return MAPPINGS
    raise AttributeError(name)

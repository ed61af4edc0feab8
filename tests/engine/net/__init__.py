"""Shared pieces of the network isolation proofs (`tests/engine/test_network_*.py`).

- `probes.py`: the `SERVER` and `PROBE` scripts, the test sandbox template, probes from inside a sandbox
  and from the host, `curl`.
- `lab.py`: the objects a test module creates itself (`Lab`, `Netns`, `HostListener`), the sweep of dead
  runs' Labs, reading what a server saw.
- `stack.py`: `NetStack` / `deployed(...)`, the module's stack with its Lab.

Every deployment's leak guard (packets leaving this machine are dropped and fail the test) is in
`testbed/leak_guard.py`, opened by `testbed.deploy.Deployment`. The host guard's rules and cgroups (`guard_rules`, `sandbox_cgroups`) live in `testbed/host_state.py`,
shared with the sandbox proofs; bounded waits in `testbed/waiting.py`.
"""

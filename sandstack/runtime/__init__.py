"""The sandbox runtime: one service per host that binds sessions to the host's declared warm sandboxes and
runs commands, moves files, snapshots, pauses and releases them (issue 12).

`python -m sandstack.runtime` serves it (FastAPI on uvicorn); its configuration contract is
`sandstack.plan.runtime`.
"""

"""`sandstack lock`: write each spec's address lock (`<spec>.lock`, sandstack.spec.addresses) from its addresses
before, or check that it is current (`--check`, for CI)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sandstack.plan.addresses import locked
from sandstack.spec import check_file
from sandstack.spec.addresses import AddressLock, lock_path, read_lock, render, stack_needs, stale
from sandstack.tooling.validate import EXIT_INVALID, EXIT_OK, EXIT_USAGE


def changes(old: AddressLock | None, new: AddressLock) -> list[str]:
    """What writing `new` over `old` allocates and frees, one phrase each."""
    out = []
    before = old.hosts if old else {}
    for host in sorted(set(before) | set(new.hosts)):
        a, b = before.get(host), new.hosts.get(host)
        if a is None or b is None:
            out.append(f"{'freed' if b is None else 'allocated'} host {host!r}'s addresses")
            continue
        if a.subnet_pool != b.subnet_pool:
            out.append(f"allocated host {host!r}'s addresses in {b.subnet_pool}")
            continue
        for pool in sorted(set(a.pools) | set(b.pools)):
            x, y = a.pools.get(pool), b.pools.get(pool)
            if x == y:
                continue
            if x is None:
                out.append(f"allocated pool {pool!r} on {host!r}: {y.subnet}"
                           + (f", gateway port {y.gateway_port}" if y.gateway_port else ""))
            elif y is None:
                out.append(f"freed pool {pool!r}'s addresses on {host!r}")
            elif x.gateway_port != y.gateway_port:
                out.append(f"{'allocated' if y.gateway_port else 'freed'} pool {pool!r}'s gateway port on {host!r}"
                           + (f": {y.gateway_port}" if y.gateway_port else ""))
        for key in ("egress_subnet", "ingress_subnet"):
            if getattr(a, key) != getattr(b, key):
                value = getattr(b, key)
                out.append(f"{'allocated' if value else 'freed'} host {host!r}'s {key}"
                           + (f": {value}" if value else ""))
    return out


def lock_file(file: str, stack: str | None, check: bool) -> tuple[int, list[str]]:
    """One spec's lock: (exit status, lines to print)."""
    result = check_file(file, lock=False)
    if result.stack is None:
        return (EXIT_USAGE if result.unreadable else EXIT_INVALID), [d.text() for d in result.diagnostics]
    path = lock_path(file)
    old, doc = None, None
    if path.exists():
        old, doc, problems = read_lock(path, str(path))
        if problems or old is None:
            return EXIT_INVALID, [d.text() for d in problems] + [
                f"sandstack: {path} was not written: sandstack lock keeps what a lock holds, and this one was edited "
                "or broken; restore it from git, or delete it to allocate every address afresh"]
    new = locked(result.stack, stack or Path(file).stem, old)
    text = render(new, Path(file).name)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return EXIT_OK, [f"{path} is up to date"]
    if check:
        if old is None or doc is None:
            return EXIT_INVALID, [f"{path} does not exist: run `sandstack lock {file}` and commit it"]
        lines = [d.text() for d in stale(old, doc, stack_needs(result.stack), file)]
        return EXIT_INVALID, lines or [f"{path} is not as `sandstack lock {file}` writes it: run it and commit it"]
    path.write_text(text, encoding="utf-8")
    done = changes(old, new) if old else []
    return EXIT_OK, [f"wrote {path}" + (": " + "; ".join(done) if done else "")]


def run(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for file in args.files:
        code, lines = lock_file(file, args.stack, args.check)
        for line in lines:
            print(line)
        status = max(status, code)
    return status

"""The runtime's OpenAPI document, generated from the app and committed at `docs/runtime-openapi.json`; a
test fails when the committed file is stale.

    python -m sandstack.runtime.openapi [ROOT]    # write it
    python -m sandstack.runtime.openapi --check   # exit 1 when stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PATH = "docs/runtime-openapi.json"
REGENERATE = "python -m sandstack.runtime.openapi"


def render_openapi() -> str:
    from sandstack.runtime.app import create_app

    return json.dumps(create_app(None).openapi(), indent=2, sort_keys=True) + "\n"


def write_openapi(root: Path) -> bool:
    """Writes the document under `root`; True when it changed."""
    target = root / PATH
    wanted = render_openapi()
    if target.exists() and target.read_text(encoding="utf-8") == wanted:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(wanted, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandstack.runtime.openapi",
                                     description=f"Write the runtime's OpenAPI document to ROOT/{PATH}.")
    parser.add_argument("root", nargs="?", default=".", type=Path, help="repository root (default: .)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed document is stale")
    args = parser.parse_args(argv)
    if args.check:
        target = args.root / PATH
        if not target.exists() or target.read_text(encoding="utf-8") != render_openapi():
            print(f"{PATH} is stale: run `{REGENERATE}` and commit the result", file=sys.stderr)
            return 1
        return 0
    print(f"wrote {PATH}" if write_openapi(args.root) else f"{PATH} is up to date")
    return 0

if __name__ == "__main__":
    sys.exit(main())

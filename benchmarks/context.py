"""What every section gets: the generated stacks, how many rounds to run, and the commands users type.

Commands are the installed entry points of the running interpreter's environment (`sandstack`,
`check-jsonschema`): whole processes, start-up included, as a user or CI job runs them.
"""

from __future__ import annotations

import compileall
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from benchmarks import stacks

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "schemas" / "stack.schema.json"
# The example organisation policies; prices.yaml beside them is a price list (`sandstack diff --prices`), not one.
POLICIES = sorted(path for path in (REPO / "policies").glob("*.yaml") if path.name != "prices.yaml")


@dataclass
class Context:
    workdir: Path                 # generated stacks and build folders live here
    quick: bool = False
    log: object = print           # progress lines (stderr in the CLI)
    paths: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # size label → (base, head) spec

    def prepare(self) -> None:
        # Byte-compile the package as pip does when it installs a wheel: an editable install run with
        # PYTHONDONTWRITEBYTECODE (set on these machines) otherwise compiles every sandstack module from source at
        # each start, a cost no installed sandstack pays and check-jsonschema (compiled at install) does not pay.
        compileall.compile_dir(REPO / "sandstack", quiet=1)
        compileall.compile_dir(REPO / "components", quiet=1)
        for size in stacks.SIZES.values():
            self.paths[size.label] = stacks.write_pair(size, self.workdir / "stacks")

    def spec(self, label: str) -> Path:
        return self.paths[label][0]

    def head(self, label: str) -> Path:
        return self.paths[label][1]

    def rounds(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def tool(name: str) -> list[str]:
    """The console script `name` beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"`{name}` is not installed in {sys.prefix} (pip install it) nor on PATH")
    return [found]


def sandstack(*args: str | Path) -> list[str]:
    return tool("sandstack") + [str(a) for a in args]


def python_module(module: str, *args: str | Path) -> list[str]:
    return [sys.executable, "-m", module] + [str(a) for a in args]


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "unknown"


def machine() -> dict[str, str]:
    """What the figures depend on, in the order a reader wants it."""
    return {
        "CPUs": str(os.cpu_count()),
        "CPU": _cpu_model(),
        "memory": _memory(),
        "OS": platform.platform(terse=True),
        "Python": platform.python_version(),
        "sandstack": _package("sandstack"),
        "pulumi": _package("pulumi"),
        "check-jsonschema": _package("check-jsonschema"),
    }


def n(label: str) -> str:
    """A size label as people read it: "1000" → "1,000"."""
    return f"{int(label):,}"

"""The runtime's container runs only the files the plan ships (sandstack.plan.runtime_host `code_files`): every
module of the service must import from those alone (a runtime module importing another plan module starts in
tests, and dies in its container)."""

from __future__ import annotations

import base64
import gzip
import io
import subprocess
import sys
import tarfile

from sandstack.plan.runtime_host import code_archive


def test_the_service_imports_from_the_shipped_files_alone(tmp_path):
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(base64.b64decode(code_archive())))) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "sandstack" / "runtime"
    modules = sorted(".".join(("sandstack", "runtime", *p.relative_to(root).with_suffix("").parts))
                     for p in root.rglob("*.py"))
    assert "sandstack.runtime.routes.sessions" in modules
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "import sandstack\n"
            "print(sandstack.__file__)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(tmp_path / "sandstack" / "__init__.py")

"""The files the components read at run time, as package data of `sandstack.components` (the same from a
checkout, an editable install or a wheel; a zipped install is not supported: Docker builds from a folder)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

ASSETS = Path(str(files("sandstack.components") / "assets"))
GUARD_SCRIPT_FILE = ASSETS / "guard.sh"
SUPERVISOR_SOURCE = ASSETS / "supervise.sh"
SETUP_STEP_SOURCE = ASSETS / "setup_step.sh"  # each setup step's wrapper in a snapshot build
CONNECTION_LOGGER_SOURCE = ASSETS / "connlog.py"
RELOAD_SOURCE = ASSETS / "reload.py"  # a host service's reload container (sandstack/plan/reload.py)
# The build context of sandstack's gateway/guard/seeder image (one Dockerfile).
INFRA_CONTEXT = ASSETS / "infra"

"""The reload container's program (components/assets/reload.py) run against a configuration volume in a folder,
with a service that refuses: what it leaves behind."""

from __future__ import annotations

import os
import threading

from sandstack.plan.reload import ConfigSet
from tests.assets.fakes import RELOAD


def _env(root, config: ConfigSet, wait: str = "5") -> dict[str, str]:
    env = dict(line.split("=", 1) for line in config.env("sandstack-x_gateway"))
    env.update({"SANDSTACK_CONFIG_DIR": str(root), "SANDSTACK_CONFIG_WAIT": wait})
    return env


def _service(root, verdict: str):
    """A service that answers the next `want` it sees: 'have' or 'refused'."""
    def answer():
        seen = os.readlink(root / "want") if (root / "want").is_symlink() else ""
        for _ in range(500):
            now = os.readlink(root / "want") if (root / "want").is_symlink() else ""
            if now and now != seen:
                digest = now.rsplit("/", 1)[-1]
                (root / "status" / verdict).write_text(digest + ("" if verdict == "have" else " squid: Bungled line 3")
                                                       + "\n")
                return
            threading.Event().wait(0.01)
    thread = threading.Thread(target=answer)
    thread.start()
    return thread


def test_a_refused_set_fails_and_want_names_the_set_in_force_again(tmp_path, capsys):
    good = ConfigSet("gateway", (("SQUID_CONF", "http_port 3128\n"),))
    bad = ConfigSet("gateway", (("SQUID_CONF", "http_access allow nowhere\n"),))
    service = _service(tmp_path, "have")
    assert RELOAD.main(_env(tmp_path, good)) == 0
    service.join()
    assert os.readlink(tmp_path / "want") == f"sets/{good.digest}"
    service = _service(tmp_path, "refused")
    assert RELOAD.main(_env(tmp_path, bad)) == 1
    service.join()
    out = capsys.readouterr().out
    assert (f"sandstack-reload sandstack-x_gateway: refused configuration {bad.digest}, keeping {good.digest}: "
            "squid: Bungled line 3") in out
    # A service started now reads the set it had in force, not the one it refused.
    assert os.readlink(tmp_path / "want") == f"sets/{good.digest}"
    assert (tmp_path / "sets" / good.digest / "SQUID_CONF").read_text() == "http_port 3128\n"

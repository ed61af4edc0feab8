"""The runtime's code reaches its container in environment variables each under the kernel's 128 KiB bound on one
environment string (MAX_ARG_STRLEN: past it the container never starts), and its entrypoint joins them again."""

from __future__ import annotations

import base64
import os
import subprocess

from sandstack.plan import runtime_host

MAX_ARG_STRLEN = 128 * 1024


def test_each_code_variable_is_under_the_kernels_bound_and_the_entrypoint_joins_them_into_the_archive(tmp_path):
    env = runtime_host.code_env()
    assert all(len(item) < MAX_ARG_STRLEN for item in env)
    values = dict(item.split("=", 1) for item in env)
    assert "".join(values[f"{runtime_host.CODE_ENV}_{i}"] for i in range(len(values))) == runtime_host.code_archive()
    # The entrypoint's own join, run by sh, gives the archive back byte for byte.
    join = runtime_host.ENTRYPOINT.split(" | base64")[0].split("&& ", 1)[1]
    done = subprocess.run(["sh", "-c", f"{join} | base64 -d"], env={**os.environ, **values}, capture_output=True,
                          check=True)
    assert done.stdout == base64.b64decode(runtime_host.code_archive())


def test_an_archive_past_what_the_variables_hold_is_refused_naming_its_size(monkeypatch):
    monkeypatch.setattr(runtime_host, "code_archive", lambda: "x" * (runtime_host.CODE_PARTS * runtime_host.CODE_PART + 1))
    try:
        runtime_host.code_env()
    except ValueError as error:
        assert f"{runtime_host.CODE_PARTS * runtime_host.CODE_PART + 1} characters" in str(error)
    else:
        raise AssertionError("no error")

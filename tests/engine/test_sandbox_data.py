"""Read-only data mounts on the real engine: files next to the stack appear in the sandbox read-only, and a
changed file is reloaded by the next `pulumi up` without rebuilding the image or replacing the sandbox."""

from __future__ import annotations

import pytest

from testbed.deploy import Deployment, engine_spec
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

FILES = {"skills/search.md": "# search\nuse the index\n", "skills/tools/run.sh": "echo run\n",
         "notes.txt": "one note\n"}


def _spec(image: str) -> str:
    return engine_spec(image, {"agent": {
        "base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB"},
        "data": [{"source": "skills", "path": "/opt/skills"}, {"source": "notes.txt", "path": "/opt/notes"}],
    }})


def test_data_is_readable_read_only_and_reloaded_in_place(docker_harness, debian_image, tmp_path):
    docker_harness.proves("Container.mounts.readOnly", "Container.uploads.contentBase64", "Volume.name")
    deployment = Deployment(docker_harness, tmp_path)
    deployment.up(_spec(debian_image), FILES)
    sandbox = deployment.container("agent")
    code, out = sh(sandbox, "cat /opt/skills/search.md /opt/skills/tools/run.sh /opt/notes/notes.txt")
    assert code == 0 and out == "# search\nuse the index\necho run\none note\n", out
    # The sandbox user can read but not write, not even where the files are its own to read.
    # The refusal is told on stdout: the shell's message comes on stderr, which Docker's exec does not order
    # with stdout (a clean-clone CI run got it first).
    code, out = sh(sandbox, "id -u; stat -c '%a' /opt/skills/search.md; "
                            "{ echo x > /opt/skills/search.md; } 2>/dev/null && echo written || echo refused")
    assert out.splitlines() == ["10001", "444", "refused"], out
    code, _ = sh(sandbox, "touch /opt/skills/new")
    assert code != 0

    before = (sandbox.id, sandbox.image.id)
    result = deployment.up(_spec(debian_image), {**FILES, "skills/search.md": "# search v2\n"})
    assert result.builds == 0
    sandbox = deployment.container("agent")
    assert (sandbox.id, sandbox.image.id) == before  # not replaced, not rebuilt
    code, out = sh(sandbox, "cat /opt/skills/search.md")
    assert code == 0 and out == "# search v2\n", out

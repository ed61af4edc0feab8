"""Read-only data mounts as wire inputs: a volume per mount, a run-once loader with the files as uploads, and
read-only mounts in every sandbox of the pool."""

from __future__ import annotations

import base64

from tests.components.helpers import Built
from testbed.specs import spec

FILES = {"skills/a.md": "# a\n", "skills/sub/b.sh": "echo b\n", "notes.txt": "note\n"}
TEMPLATE = {"base_image": "busybox:1.36", "data": [{"source": "skills", "path": "/opt/skills"},
                                                     {"source": "notes.txt", "path": "/opt/notes"}]}


def test_a_pool_with_data_gets_volumes_a_loader_and_read_only_mounts(tmp_path):
    built = Built.from_spec(tmp_path / "spec", spec({"t": TEMPLATE}, pools={"t": {"template": "t", "hosts": ["local"],
                                                                                   "replicas": 2}}), FILES)
    assert [built.reg(f"sandstack-t.local-data{i}").inputs["name"] for i in (0, 1)] == ["sandstack-t-t-data0",
                                                                                         "sandstack-t-t-data1"]
    loader = built.container("sandstack-t.local-data-seeder")
    uploads = {u["file"]: base64.b64decode(u["contentBase64"]).decode() for u in loader.inputs["uploads"]}
    assert uploads == {"/staging/0/a.md": "# a\n", "/staging/0/sub/b.sh": "echo b\n", "/staging/1/notes.txt": "note\n"}
    assert loader.inputs["command"][2].splitlines() == [
        "set -e",
        "chmod -R u+w /seed/0 && find /seed/0 -mindepth 1 -delete", "if [ -d /staging/0 ]; then cp -R /staging/0/. /seed/0/; fi",
        "chmod -R a=rX /seed/0",
        "chmod -R u+w /seed/1 && find /seed/1 -mindepth 1 -delete", "if [ -d /staging/1 ]; then cp -R /staging/1/. /seed/1/; fi",
        "chmod -R a=rX /seed/1",
        "rm -rf /staging/*",
    ]
    assert (loader.inputs["networkMode"], loader.inputs["capabilities"]) == ("none", {"drops": ["ALL"]})
    for i in (0, 1):
        mounts = built.container(f"sandstack-t.local-{i}").inputs["mounts"]
        assert {"type": "volume", "source": "sandstack-t-t-data0", "target": "/opt/skills", "readOnly": True} in mounts
        assert {"type": "volume", "source": "sandstack-t-t-data1", "target": "/opt/notes", "readOnly": True} in mounts

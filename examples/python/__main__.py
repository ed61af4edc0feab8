"""Agent sandboxes from a sandstack spec, through the package's generated Python SDK (`pulumi_sandstack`)."""

from pathlib import Path

import pulumi
import pulumi_sandstack as sandstack

spec = Path(__file__).parent.parent / "sandboxes.yaml"
# The spec's text; the folder its relative paths (snapshot files, data mounts) are read from.
agents = sandstack.SandboxStack("agents", spec_yaml=spec.read_text(), source_dir=str(spec.parent),
                                stack=pulumi.get_stack())

pulumi.export("sandboxes", agents.sandboxes)
pulumi.export("hosts", agents.hosts)
pulumi.export("runtime", agents.runtime)

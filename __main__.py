"""The Pulumi program: load `stacks/<stack>.yaml` with the same loader `sandstack validate` uses, build
the components, export what consumers (an agent platform) read with `pulumi stack output --json`."""

import pulumi

from components.sandbox_stack import SandboxStack, SandboxStackArgs
from sandstack.spec import SpecError, load_stack

stack = pulumi.get_stack()
spec_file = pulumi.Config().get("spec") or f"stacks/{stack}.yaml"
try:
    spec = load_stack(spec_file)
except SpecError as error:
    # Nothing is created: the same located messages as `sandstack validate`, without a traceback.
    raise pulumi.RunError(f"{spec_file} is not a valid sandstack spec:\n{error}") from None

sandstack = SandboxStack("sandstack", SandboxStackArgs(spec=spec, stack=stack))
pulumi.export("sandboxes", sandstack.sandboxes)
pulumi.export("hosts", {name: {"address": host.address, "guard": host.guard.container_name}
                        for name, host in sandstack.hosts.items()})

import * as pulumi from "@pulumi/pulumi";
import * as sandstack from "@pulumi/sandstack";

// The spec file, relative to this program's directory; its own relative paths are read from its folder.
const agents = new sandstack.SandboxStack("agents", {
    specFile: "../sandboxes.yaml",
    stack: pulumi.getStack(),
});

export const sandboxes = agents.sandboxes;
export const hosts = agents.hosts;
export const runtime = agents.runtime;
export const containers = agents.sandboxes.apply(list => list.map(sandbox => sandbox.container));

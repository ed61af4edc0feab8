"""Agent sandboxes from a sandstack spec, through the package's generated Python SDK (`pulumi_sandstack`): the spec of
../sandboxes.yaml as typed arguments (`pulumi_sandstack.spec`), each field checked by the SDK's types."""

import pulumi
import pulumi_sandstack as sandstack
from pulumi_sandstack import spec

# A value may be another resource's output; here, a config value with a default.
allowed = pulumi.Config().get("allowedApi") or "api.example.com:443"

agents = sandstack.SandboxStack("agents", stack=pulumi.get_stack(), spec=spec.StackArgs(
    version=1,
    description="Example stack for the Pulumi package examples (examples/README.md).",
    hosts={"local": spec.HostArgs(endpoint="unix:///var/run/docker.sock",
                                  capacity=spec.CapacityArgs(cpus=4, memory="8GiB", disk="20GiB"))},
    templates={
        "shell": spec.TemplateArgs(
            description="A throwaway shell with no network at all.",
            base_image="busybox:1.36",
            command=["sh", "-c", "while true; do sleep 3600; done"],
            limits=spec.LimitsOverrideArgs(cpus=0.5, memory="256MiB", disk="256MiB", pids=128)),
        "python": spec.TemplateArgs(
            description="A Python agent whose egress is an allow-list, its port on the host's loopback.",
            base_image="python:3.12-slim",
            command=["python", "-m", "http.server", "8080"],
            limits=spec.LimitsOverrideArgs(cpus=1, memory="1GiB", disk="1GiB", pids=256),
            network=spec.NetworkPolicyArgs(egress="allow-list", allow=[allowed]),
            ports=[spec.PortArgs(name="api", port=8080, exposure="host")]),
    },
    pools={"shell": spec.PoolArgs(template="shell", hosts=["local"], replicas=2),
           "python": spec.PoolArgs(template="python", hosts=["local"], replicas=1)},
))

pulumi.export("sandboxes", agents.sandboxes)
pulumi.export("hosts", agents.hosts)
pulumi.export("runtime", agents.runtime)

import * as docker from "@pulumi/docker";
import * as pulumi from "@pulumi/pulumi";
import * as sandstack from "@pulumi/sandstack";

// The Python template's base image, pinned to the digest the registry returns: another resource's output, which
// the spec takes like any value (SandboxStack waits for it before planning; the image build depends on it).
const python = new docker.RemoteImage("python", { name: "python:3.12-slim", keepLocally: true });

// The spec of ../sandboxes.yaml as typed values: completion and compile-time checks for every field.
const agents = new sandstack.SandboxStack("agents", {
    stack: pulumi.getStack(),
    spec: {
        version: 1,
        description: "Example stack for the Pulumi package examples (examples/README.md).",
        hosts: {
            local: {
                endpoint: "unix:///var/run/docker.sock",
                capacity: { cpus: 4, memory: "8GiB", disk: "20GiB" },
            },
        },
        templates: {
            shell: {
                description: "A throwaway shell with no network at all.",
                baseImage: "busybox:1.36",
                command: ["sh", "-c", "while true; do sleep 3600; done"],
                limits: { cpus: 0.5, memory: "256MiB", disk: "256MiB", pids: 128 },
            },
            python: {
                description: "A Python agent whose egress is an allow-list, its port on the host's loopback.",
                baseImage: python.repoDigest,
                command: ["python", "-m", "http.server", "8080"],
                limits: { cpus: 1, memory: "1GiB", disk: "1GiB", pids: 256 },
                network: { egress: "allow-list", allow: ["api.example.com:443"] },
                ports: [{ name: "api", port: 8080, exposure: "host" }],
            },
        },
        pools: {
            shell: { template: "shell", hosts: ["local"], replicas: 2 },
            python: { template: "python", hosts: ["local"], replicas: 1 },
        },
    },
});

export const sandboxes = agents.sandboxes;
export const hosts = agents.hosts;
export const runtime = agents.runtime;
export const containers = agents.sandboxes.apply(list => list.map(sandbox => sandbox.container));

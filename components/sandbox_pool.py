"""SandboxPool: N sandbox containers of one template on one host, with the secure defaults applied."""

from __future__ import annotations

import base64

from dataclasses import dataclass, field

import pulumi
import pulumi_docker as docker

from sandstack.plan import types
from sandstack.plan.changes import sandbox_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE, STATE_MOUNT
from sandstack.plan.data import SEED_DIR, DataPlan, plan_data
from sandstack.components.resource_args import container_labels, run_args, volume_labels
from sandstack.plan.network import PoolNetwork
from sandstack.plan.sandbox import SUPERVISOR_ENTRYPOINT, output_name, plan_sandbox, port_address, sandbox_name
from sandstack.plan.secrets import SecretsPlan, plan_secrets
from sandstack.components.secrets import secret_value
from sandstack.spec.models import SecretRef
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.resolve import ResolvedTemplate

__all__ = ["SandboxPool", "SandboxPoolArgs", "SUPERVISOR_ENTRYPOINT", "sandbox_name"]



def _checked(seeder: docker.Container, what: str, missing: str) -> pulumi.Output[docker.Container]:
    """The seeder, once it exited 0: the provider records a failed run-once container's exit code without
    failing; we fail, so no sandbox starts without what it was seeded with."""
    def check(code: int | None) -> docker.Container:
        if code not in (None, 0):
            raise pulumi.RunError(f"{what} exited with {code}: its sandboxes would start without {missing}")
        return seeder
    return seeder.exit_code.apply(check)


@dataclass(frozen=True)
class SandboxPoolArgs:
    stack: str
    pool: str
    host: str
    host_address: str  # how clients reach the host's published ports
    template: ResolvedTemplate
    replicas: int
    image: pulumi.Input[str]  # image id of the snapshot
    image_name: pulumi.Input[str]
    digest: str
    network: PoolNetwork
    gpu_device_ids: tuple[tuple[str, ...], ...]  # each replica's GPU devices (plan.host), empty when none
    network_name: pulumi.Input[str]  # the Docker network (an output, so it is created first)
    guard_state_volume: pulumi.Input[str]
    infra_image: pulumi.Input[str]
    labels: dict[str, str]
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    workspace_volumes: dict[str, pulumi.Input[str]] = field(default_factory=dict)  # Docker name → its output
    ingress: Ingress | None = None  # the host's, for the URLs of `exposure: url` ports


class SandboxPool(pulumi.ComponentResource):
    sandboxes: pulumi.Output[list[dict]]

    def __init__(self, name: str, args: SandboxPoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.SANDBOX_POOL, name, None, opts)
        t = args.template
        waits_on = list(args.depends_on)
        mounts = [
            # The guard's boot-id marker: the supervisor starts the command only once the host is closed.
            docker.ContainerMountArgs(type="volume", source=args.guard_state_volume, target=STATE_MOUNT,
                                      read_only=True),
        ]
        secrets = plan_secrets(args.stack, args.pool, t)
        if secrets:
            volume, seeder = self._secrets(name, args, secrets)
            waits_on.append(seeder)
            mounts.append(docker.ContainerMountArgs(type="volume", source=volume.name, target=secrets.path,
                                                    read_only=True))
        data = plan_data(args.stack, args.pool, t)
        if data:
            volumes, data_seeder = self._data(name, args, data)
            waits_on.append(data_seeder)
            mounts += [docker.ContainerMountArgs(type="volume", source=v.name, target=d.path, read_only=True)
                       for v, d in zip(volumes, data.volumes)]

        self.containers = [
            self._sandbox(name, args, i, mounts, waits_on) for i in range(args.replicas)
        ]
        self.sandboxes = pulumi.Output.all(*[self._describe(args, i, c) for i, c in enumerate(self.containers)])
        self.register_outputs({"sandboxes": self.sandboxes})

    def _secrets(self, name: str, args: SandboxPoolArgs,
                 plan: SecretsPlan) -> tuple[docker.Volume, pulumi.Output[docker.Container]]:
        # One volume per pool and host; sandboxes mount it read-only, so even the owner cannot change
        # or chmod its secrets, and no other user can read them (0400).
        volume = docker.Volume(
            f"{name}-secrets", name=plan.volume,
            labels=volume_labels(args.labels), opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        # Run-once seeder: `uploads` cannot write into a read-only-root sandbox, so a throwaway container
        # with only CHOWN copies the files into the volume with the sandbox user as owner, then exits.
        seeder = docker.Container(
            f"{name}-{types.SECRETS_SEEDER}",
            name=plan.seeder_name,
            image=args.infra_image,
            network_mode="none",
            command=["sh", "-c", plan.script],
            uploads=[docker.ContainerUploadArgs(file=u.path, content=secret_value(u.secret), permissions=plan.mode)
                     for u in plan.uploads],
            mounts=[docker.ContainerMountArgs(type="volume", source=volume.name, target=plan.seed_dir)],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=list(plan.capability_adds)),
            security_opts=["no-new-privileges:true"],
            attach=True,
            must_run=False,
            logs=True,
            labels=container_labels({**args.labels, LABEL_ROLE: plan.role}),
            opts=pulumi.ResourceOptions(parent=self),
        )

        # Sandboxes depend on this output, not only on the seeder: a failed seed stops their creation.
        return volume, _checked(seeder, f"secrets seeder for pool '{args.pool}' on host '{args.host}'",
                                "their secrets")

    def _data(self, name: str, args: SandboxPoolArgs,
              plan: DataPlan) -> tuple[list[docker.Volume], pulumi.Output[docker.Container]]:
        # One volume per data mount: sandboxes mount each read-only where the spec says.
        volumes = [
            docker.Volume(f"{name}-data{i}", name=v.name, labels=volume_labels(args.labels),
                          opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            for i, v in enumerate(plan.volumes)
        ]
        # Run-once loader: the provider uploads the files into it (a changed file replaces only this container),
        # it copies them into the volumes, readable by every user and writable by none.
        seeder = docker.Container(
            f"{name}-{types.DATA_SEEDER}",
            name=plan.seeder_name,
            image=args.infra_image,
            network_mode="none",
            command=["sh", "-c", plan.script],
            uploads=[docker.ContainerUploadArgs(file=target, content_base64=base64.b64encode(source.read_bytes()).decode())
                     for target, source in plan.uploads],
            mounts=[docker.ContainerMountArgs(type="volume", source=v.name, target=f"{SEED_DIR}/{i}")
                    for i, v in enumerate(volumes)],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
            security_opts=["no-new-privileges:true"],
            attach=True,
            must_run=False,
            logs=True,
            labels=container_labels({**args.labels, LABEL_ROLE: "data-seeder"}),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return volumes, _checked(seeder, f"data loader for pool '{args.pool}' on host '{args.host}'", "their data")

    def _sandbox(self, name: str, args: SandboxPoolArgs, index: int, mounts: list, waits_on: list) -> docker.Container:
        plan = plan_sandbox(stack=args.stack, pool=args.pool, host=args.host, template=args.template, index=index,
                            network=args.network, digest=args.digest, labels=args.labels,
                            gpu_device_ids=args.gpu_device_ids[index] if args.gpu_device_ids else (),
                            ingress=args.ingress)
        run = plan.run
        # One sandbox, exactly as planned (sandstack/plan/sandbox.py); only Pulumi's outputs are added here.
        return docker.Container(
            f"{name}-{index}",
            name=plan.name,
            hostname=plan.hostname,
            image=args.image,
            user=plan.user,
            working_dir=plan.workdir,
            # The supervisor (under Docker's init) starts the command once the host is closed and turns the
            # guard's lifetime verdicts into exit statuses; the guard enforces them from outside.
            entrypoints=list(plan.entrypoints),
            command=list(plan.command) if plan.command else None,
            init=True,
            envs=[secret_value(v.secret).apply(lambda s, k=k: f"{k}={s}") if isinstance(v, SecretRef) else f"{k}={v}"
                  for k, v in plan.env.items()],
            labels=container_labels(plan.labels),
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=args.network_name)],
            dns=list(plan.dns) if plan.dns else None,
            ports=[docker.ContainerPortArgs(internal=p.internal, external=p.external, ip=p.ip, protocol=p.protocol)
                   for p in plan.ports],
            read_only=plan.read_only,
            storage_opts=plan.storage_opts,
            tmpfs=plan.tmpfs,
            shm_size=plan.shm_size_mb,
            # Disk workspaces: Docker fills a new one from the image only when the guard made it empty (`seed`);
            # `volume_options.no_copy` would say so here, but the provider refuses it below API 1.45.
            mounts=mounts + [docker.ContainerMountArgs(type="volume", source=args.workspace_volumes[w.name],
                                                       target=w.path) for w in plan.workspaces],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=list(plan.capability_adds) or None),
            security_opts=list(plan.security_opts) if plan.security_opts else None,
            privileged=plan.privileged,
            runtime=plan.runtime,
            memory=plan.memory_mb,
            memory_swap=plan.memory_mb,
            cpus=plan.cpus,
            # Open files per process, hard limit too (a process cannot raise it): with the pids limit, this
            # bounds the sockets a sandbox can hold open.
            ulimits=[docker.ContainerUlimitArgs(name="nofile", soft=plan.open_files, hard=plan.open_files)],
            cgroup_parent=plan.cgroup_parent,
            # The host's own devices of the requested model, by id (placement: sandstack/plan/host.py).
            device_requests=[docker.ContainerDeviceRequestArgs(driver="nvidia", device_ids=list(plan.gpu_device_ids),
                                                               capabilities=["gpu"])] if plan.gpu_device_ids else None,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits_on, replace_on_changes=sandbox_replace_on_changes()),
        )

    def _describe(self, args: SandboxPoolArgs, index: int, container: docker.Container) -> pulumi.Output[dict]:
        t = args.template

        def field_of(port: object, key: str) -> object:
            return port.get(key) if isinstance(port, dict) else getattr(port, key, None)

        def shape(values: list) -> dict:
            container_name, ports, image_name = values
            published = {(int(field_of(p, "internal")), field_of(p, "protocol") or "tcp"): p for p in (ports or [])}
            out_ports = []
            for p in t.ports:
                bound = published.get((p.port, p.protocol))
                external = field_of(bound, "external") if bound is not None else None
                address = port_address(p, int(external) if external else None, host_address=args.host_address,
                                       ingress=args.ingress, pool=args.pool, index=index)
                out_ports.append({"name": p.name, "port": p.port, "protocol": p.protocol, "exposure": p.exposure,
                                  "address": address})
            return {
                "name": output_name(args.host, args.pool, index), "pool": args.pool, "template": t.name,
                "host": args.host,
                "container": container_name,
                "image": image_name, "digest": args.digest, "version": t.snapshot_version,
                "egress": t.network.egress, "network": args.network.name, "ports": out_ports,
            }

        return pulumi.Output.all(container.name, container.ports, args.image_name).apply(shape)

"""One host's nodes: its provider, infra image, disk workspaces, networks and the host-role components (guard,
gateway, ingress, runtime, logger), each a volume and a container written by one recipe (`_role`). Every host
role's node is named, typed and told (`About.kind`) from its descriptor (sandstack.spec.roles)."""

from __future__ import annotations

from typing import Any

from sandstack.plan import gateway as gateway_plan
from sandstack.plan import guard as guard_plan
from sandstack.plan import ingress as ingress_plan
from sandstack.plan import logger as logger_plan
from sandstack.plan import runtime_host, types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.container import RunSettings
from sandstack.plan import reload as reload_plan
from sandstack.plan.contract import (CONFIG_DIR, GUARD_CGROUP_MOUNT, GUARD_STATE_DIR, HOST_CGROUP_MOUNT,
                                     INGRESS_RUNTIME_DIR, LABEL_POOL, LABEL_ROLE, LABEL_STACK, label_key)
from sandstack.plan.ingress import wake_token_label
from sandstack.plan.naming import infra_name
from sandstack.plan.reload import ConfigSet
from sandstack.plan.host import HostPlan
from sandstack.plan.network import GATEWAY_ALIAS
from sandstack.plan.package_files import GUARD_SCRIPT_FILE, INFRA_CONTEXT
from sandstack.spec.models.hosts import RuntimeService
from sandstack.plan.runtime import (DEFAULT_STATE_DIR, ENV_SSH_HOST_KEY, ENV_STORE_CA, ENV_STORE_PASSWORD, ENV_TOKEN,
                                    ENV_WAKE_TOKEN)
from sandstack.plan.tree import (About, CONTAINER, NETWORK, PROVIDER, REMOTE_IMAGE, VOLUME, After, Node, Options, Ref,
                                 Secret, Tree, bridge_options, inputs, label_list, node_key, run_inputs)
from sandstack.spec.models import Host
from sandstack.spec.roles import HOST_ROLES, HostRoleInfo, Part

NO_NEW_PRIVILEGES = ["no-new-privileges:true"]
LABEL_JOINED = label_key("joined")  # joined_label
GUARD_SCRIPT = GUARD_SCRIPT_FILE.read_text()
# What the guard's container runs: the service side of the reload protocol, then the guard.
GUARD_PROGRAM = reload_plan.SERVICE_SH + GUARD_SCRIPT
# Each part's resource type (sandstack.spec.roles.Part.resource).
RESOURCE_TYPES = {"provider": PROVIDER, "image": REMOTE_IMAGE, "network": NETWORK, "volume": VOLUME,
                  "container": CONTAINER}
PROVIDER_PART = HOST_ROLES["provider"].part("provider")
INFRA_PART = HOST_ROLES["infra"].part("image")
POOL_NETWORK = HOST_ROLES["networks"].part("network", per_pool=True)
EGRESS_NETWORK = HOST_ROLES["networks"].part("network", per_pool=False)


def part_name(base: str, part: Part, pool: str = "") -> str:
    """A host role's node's logical name: `<component>-<host>-<part>` (`net.<pool>` for a pool's network)."""
    return f"{base}-{part.name.format(pool=pool)}"


def part_key(base: str, part: Part, pool: str = "") -> str:
    return node_key(RESOURCE_TYPES[part.resource], part_name(base, part, pool))


def part_about(part: Part, host: str, pool: str | None = None) -> About:
    return About(part.kind, host, pool)


class HostKeys:
    """The keys of a host's nodes that its pools and templates refer to."""

    def __init__(self, base: str, plan: HostPlan):
        guard = HOST_ROLES["guard"]
        self.host = node_key(types.SANDBOX_HOST, base)
        self.provider = part_key(base, PROVIDER_PART)
        self.infra = part_key(base, INFRA_PART)
        self.guard_state = part_key(base, guard.part("volume"))
        self.guard = part_key(base, guard.part("container"))
        self.networks = {pool: part_key(base, POOL_NETWORK, pool) for pool in plan.networks}
        self.workspaces = {w.name: node_key(VOLUME, f"{base}-ws.{w.name.removeprefix(f'sandstack-{plan.stack}-')}")
                           for w in plan.workspaces}
        # What a sandbox waits for: the host closed, its way out and its connection log running, each with the
        # configuration that names the sandbox in force (a role that reloads in place: its reload container).
        present = {"guard": True, "gateway": bool(plan.gateway and plan.egress_bridge), "logger": bool(plan.logger)}
        self.ready = tuple(part_key(base, ready_part(HOST_ROLES[name])) for name, there in present.items() if there)
        self.reloads: dict[str, str] = {}  # each reload container's key → its role (filled as they are planned)


def ready_part(role: HostRoleInfo) -> Part:
    """What waits for a role: its reload container where it takes its configuration in place, else its container."""
    return role.part("container", config=True) if role.reload == "in place" else role.part("container")


def _component(out: Tree, keys: HostKeys, plan: HostPlan, base: str, role: HostRoleInfo,
               after: tuple[str, ...] = ()) -> str:
    """A host role's component (told as its container is), under the host."""
    assert role.component is not None and role.container is not None
    return out.add(Node(f"{base}-{role.name}", role.component, keys.host, keys.provider,
                        options=Options(depends_on=after)), About(role.container.kind, plan.host)).key


def _role(out: Tree, keys: HostKeys, plan: HostPlan, base: str, role: HostRoleInfo, *, target: str, volume_name: str,
          component_after: tuple = (), config: ConfigSet | None = None, joins_from: tuple[str, ...] = (),
          **container: Any) -> str:
    """A host role: its component and the named volume that outlives its container (replaced delete-first: a
    named volume cannot exist twice; mounted at `target`), then its container (`_container`); with a `config`, its
    configuration volume before and its reload container after (`_reload`). Returns the component's key."""
    parent = _component(out, keys, plan, base, role, component_after)
    part = role.part("volume")
    vol = out.add(Node(part_name(base, part), VOLUME, parent, keys.provider,
                       inputs(name=volume_name, labels=label_list(plan.labels)),
                       Options(delete_before_replace=True)), part_about(part, plan.host))
    container["mounts"] = container.get("mounts", []) + [
        {"type": "volume", "source": Ref(vol.key, "name"), "target": target}]
    config_volume = _config_volume(out, keys, plan, base, role, parent, container) if config else None
    service = _container(out, keys, plan, base, role, parent, **container)
    if config and config_volume:
        _reload(out, keys, plan, base, role, parent, config, service, container["container_name"], config_volume,
                joins_from)
    return parent


def _config_volume(out: Tree, keys: HostKeys, plan: HostPlan, base: str, role: HostRoleInfo, parent: str,
                   container: dict[str, Any]) -> str:
    """The role's configuration volume, mounted into its container (which writes its reports there)."""
    part = role.part("volume", config=True)
    vol = out.add(Node(part_name(base, part), VOLUME, parent, keys.provider,
                       inputs(name=infra_name(plan.stack, f"{role.name}-config"), labels=label_list(plan.labels)),
                       Options(delete_before_replace=True)), part_about(part, plan.host))
    container["mounts"] = container.get("mounts", []) + [
        {"type": "volume", "source": Ref(vol.key, "name"), "target": CONFIG_DIR}]
    return vol.key


def _reload(out: Tree, keys: HostKeys, plan: HostPlan, base: str, role: HostRoleInfo, parent: str, config: ConfigSet,
            service: str, service_name: str, volume: str, joins_from: tuple[str, ...]) -> None:
    """The role's reload container (sandstack.plan.reload): run once per configuration, after the service; renewed
    with the service too (it names it as a dependency: Pulumi's dependent rule), so a new service gets its
    configuration and its networks. Only a reload that joins networks holds the Docker socket; none has a network."""
    part = role.part("container", config=True)
    keys.reloads[part_key(base, part)] = role.name
    leave = f"{LABEL_STACK}={plan.stack} {label_key('host')}={plan.host} {LABEL_POOL}" if config.joins else ""
    env = [After(line, (service,)) if line.startswith(f"{reload_plan.CONTROL}SERVICE=") else line
           for line in config.env(service_name, leave)]
    out.add(Node(part_name(base, part), CONTAINER, parent, keys.provider, inputs(
        name=infra_name(plan.stack, f"{role.name}-reload"), image=Ref(keys.infra, "image_id"),
        command=list(reload_plan.COMMAND), envs=env, network_mode="none",
        capabilities=inputs(drops=["ALL"]), security_opts=NO_NEW_PRIVILEGES, read_only=True,
        memory=reload_plan.MEMORY_MB, memory_swap=reload_plan.MEMORY_MB, cpus=reload_plan.CPUS,
        mounts=[{"type": "volume", "source": Ref(volume, "name"), "target": CONFIG_DIR}] + (
            [{"type": "bind", "source": runtime_host.DOCKER_SOCKET, "target": runtime_host.DOCKER_SOCKET}]
            if config.joins else []),
        attach=True, must_run=False, logs=True, log_driver=reload_plan.LOGS.driver, log_opts=reload_plan.LOGS.opts,
        labels=label_list({**plan.labels, LABEL_ROLE: f"{role.name}-reload"})),
        Options(depends_on=(service, *joins_from))), part_about(part, plan.host))


def _container(out: Tree, keys: HostKeys, plan: HostPlan, base: str, role: HostRoleInfo, parent: str, *,
               container_name: str, run: RunSettings, memory_mb: int, cpus: str, command: list[str],
               adds: tuple[str, ...] | None = None, after_guard: bool = False, after: tuple[str, ...] = (),
               labels_after: dict | None = None, **extra: Any) -> str:
    """A host role's container, from the infra image: no capabilities but `adds`, a read-only root, no new
    privileges, bounded memory and CPU, the host's labels with its role; replaced where the provider would only
    record a change (`host_container_replace_on_changes`)."""
    part = role.part("container")
    return out.add(Node(part_name(base, part), CONTAINER, parent, keys.provider, inputs(
        name=container_name, image=Ref(keys.infra, "image_id"), command=command,
        capabilities=inputs(drops=["ALL"], adds=list(adds) if adds is not None else None),
        security_opts=NO_NEW_PRIVILEGES, read_only=True, memory=memory_mb, memory_swap=memory_mb, cpus=cpus,
        **run_inputs(run), labels=label_list({**plan.labels, LABEL_ROLE: role.name}) + (
            [labels_after] if labels_after else []), **extra),
        Options(depends_on=((keys.guard,) if after_guard else ()) + after,
                replace_on_changes=tuple(host_container_replace_on_changes()))), part_about(part, plan.host)).key


def plan_host_nodes(out: Tree, stack_key: str, component: str, host: str, spec: Host, plan: HostPlan) -> HostKeys:
    base = f"{component}-{host}"
    keys = HostKeys(base, plan)
    out.add(Node(base, types.SANDBOX_HOST, stack_key), About("host", host))
    # The daemon connection every child of this host uses; TLS material only ever from secrets.
    tls = spec.tls
    out.add(Node(part_name(base, PROVIDER_PART), PROVIDER, keys.host, None, inputs(
        host=spec.endpoint, ssh_opts=list(spec.ssh_opts) or None,
        ca_material=Secret(tls.ca.secret) if tls else None, cert_material=Secret(tls.cert.secret) if tls else None,
        key_material=Secret(tls.key.secret) if tls else None)), part_about(PROVIDER_PART, host))
    infra = plan.infra
    # A declared image is used as is (pulled by the daemon if missing) and never deleted; else sandstack's own
    # image, built on the host from the packaged assets/infra.
    out.add(Node(part_name(base, INFRA_PART), REMOTE_IMAGE, keys.host, keys.provider,
                 inputs(name=infra.name, keep_locally=True) if infra.declared else inputs(
                     name=infra.name, build={"context": str(INFRA_CONTEXT), "dockerfile": "Dockerfile",
                                             "labels": plan.labels},
                     triggers={"digest": infra.digest}, keep_locally=False)), part_about(INFRA_PART, host))
    # Each sandbox's disk workspaces: volumes whose filesystems the guard makes and attaches, so they exist before
    # it and outlive it. Replaced delete-first: the name is explicit.
    for w in plan.workspaces:
        out.add(Node(keys.workspaces[w.name].split("::", 1)[1], VOLUME, keys.host, keys.provider, inputs(
            name=w.name, driver="local", driver_opts=w.driver_opts,
            labels=label_list({**plan.labels, LABEL_ROLE: "workspace"})), Options(delete_before_replace=True)),
            About("disk workspace", host))
    # Closes the host to every sandbox on it and sets each sandbox's pids limit before it starts; created first and
    # deleted last (the networks depend on it).
    g = plan.guard
    _role(out, keys, plan, base, HOST_ROLES["guard"], target=GUARD_STATE_DIR, volume_name=g.state_volume,
          container_name=g.container_name, run=g.run, memory_mb=guard_plan.MEMORY_MB, config=g.config,
          cpus=guard_plan.CPUS, command=["sh", "-c", GUARD_PROGRAM, "sandstack-guard"],
          adds=tuple(g.capabilities),
          component_after=tuple(keys.workspaces.values()), network_mode="host", pid_mode="host", envs=g.env,
          tmpfs=dict(guard_plan.TMPFS),
          mounts=[{"type": "bind", "source": HOST_CGROUP_MOUNT, "target": GUARD_CGROUP_MOUNT}],
          volumes=[{"host_path": g.workspaces_mount[0], "container_path": g.workspaces_mount[1]}],
          devices=[{"host_path": guard_plan.LOOP_CONTROL}],
          device_cgroup_rules=list(guard_plan.LOOP_DEVICE_RULES))
    # A network's name is fixed per pool, so a replacement (a new subnet) deletes the old one first.
    for pool, net in plan.networks.items():
        # One bridge per pool: internal (no route out) unless the pool egresses directly or publishes ports.
        out.add(Node(part_name(base, POOL_NETWORK, pool), NETWORK, keys.host, keys.provider, inputs(
            name=net.name, internal=net.internal, driver="bridge", options=bridge_options(net.bridge),
            ipam_configs=[inputs(subnet=str(net.subnet), gateway=net.bridge_ip, ip_range=net.sandbox_range)],
            labels=label_list({**plan.labels, LABEL_POOL: pool})),
            Options(delete_before_replace=True, depends_on=(keys.guard,))), part_about(POOL_NETWORK, host, pool))
    if plan.gateway and plan.egress_bridge:
        _gateway(out, keys, plan, base)
    if plan.logger:
        # Every new connection of the pools that log them, before any of their sandboxes starts.
        lg = plan.logger
        _role(out, keys, plan, base, HOST_ROLES["logger"], target=logger_plan.LOG_DIR, volume_name=lg.log_volume,
              container_name=lg.container_name, run=lg.run, config=lg.config,
              memory_mb=logger_plan.MEMORY_MB, cpus=logger_plan.CPUS, command=lg.command,
              adds=logger_plan.CAPABILITIES, network_mode="host", envs=lg.env, tmpfs=dict(logger_plan.TMPFS))
    if plan.runtime:
        # The sessions' API: binds sessions to the declared sandboxes; creates only a pool's declared on-demand places.
        r = plan.runtime
        _role(out, keys, plan, base, HOST_ROLES["runtime"], target=DEFAULT_STATE_DIR, volume_name=r.state_volume,
              container_name=r.container_name, run=r.run, config=r.config_set,
              memory_mb=runtime_host.MEMORY_MB, cpus=runtime_host.CPUS, command=["sh", "-c", runtime_host.ENTRYPOINT],
              after_guard=True, network_mode="host", envs=[*r.env, Secret(r.spec.token.secret, f"{ENV_TOKEN}={{}}"),
                                                         *(Secret(r.spec.tokens[scope].secret, f"{t.env}={{}}")
                                                           for scope, t in r.config.tokens.items()),
                                                         wake_token(plan),
                                                         *([Secret(r.spec.ssh.host_key.secret,
                                                                   f"{ENV_SSH_HOST_KEY}={{}}")] if r.spec.ssh else []),
                                                         *store_secrets(r.spec)],
              # With on-demand pools it is deleted before the networks and workspace volumes its sandboxes use: its
              # stop removes them (sandstack.runtime.ondemand.shutdown), so `pulumi destroy` can delete those.
              after=(*keys.networks.values(), *keys.workspaces.values()) if r.ondemand else (),
              tmpfs=dict(runtime_host.TMPFS),
              mounts=[{"type": "bind", "source": runtime_host.DOCKER_SOCKET, "target": runtime_host.DOCKER_SOCKET}])
    if plan.ingress:
        _ingress(out, keys, plan, base)
    return keys


def joined_label(networks: tuple[str, ...]) -> dict:
    """A label on a service its reload container joins to pool networks: always the same text, but depending on
    those networks, so that one of them replaced (delete-first: its name is fixed) renews the service with it, as a
    network it joined itself would (Pulumi's dependent rule: Docker removes no network a container is on). There
    even with no network yet, so that the first one joined changes no input."""
    return {"label": LABEL_JOINED, "value": After("pool networks, joined by its reload container", networks)}


def store_secrets(runtime: RuntimeService) -> list[Secret]:
    """The snapshot store's password and CA, Pulumi secrets, in the runtime's environment
    (docs/design/snapshot-store.md)."""
    store = runtime.snapshot_store
    if store is None:
        return []
    return [Secret(store.password.secret, f"{ENV_STORE_PASSWORD}={{}}"),
            *([Secret(store.ca.secret, f"{ENV_STORE_CA}={{}}")] if store.ca else [])]


def wake_token(plan: HostPlan) -> Secret:
    """The ingress's wake token, in the runtime's and the ingress's environment alike: derived from the host's
    runtime token (never in the Caddyfile, which names only the variable; never in any review output). In the
    runtime's whether the host has an ingress or not, so an ingress added changes none of the runtime's inputs."""
    assert plan.runtime
    return Secret(plan.runtime.spec.token.secret, f"{ENV_WAKE_TOKEN}={{}}",
                  derive=wake_token_label(plan.stack, plan.host))


def _gateway(out: Tree, keys: HostKeys, plan: HostPlan, base: str) -> None:
    gw = plan.gateway
    assert gw is not None
    # The gateway's way out: a routed bridge that only the gateway joins (so icc there is its own traffic).
    egress = out.add(Node(part_name(base, EGRESS_NETWORK), NETWORK, keys.host, keys.provider, inputs(
        name=plan.egress_network, internal=False, driver="bridge", options=bridge_options(plan.egress_bridge, icc=True),
        # A fixed subnet: the gateway's logging resolver listens on its bridge address.
        ipam_configs=[inputs(subnet=str(plan.egress_subnet), gateway=str(plan.egress_subnet[1]))]
        if plan.egress_subnet else None,
        labels=label_list({**plan.labels, LABEL_ROLE: "egress"})), Options(depends_on=(keys.guard,))),
        part_about(EGRESS_NETWORK, plan.host))
    # Its own network only: its reload container joins it to each gateway pool's network (the alias is how sandboxes
    # name their proxy, at a fixed address the guard opens), so a pool added or taken off leaves it running. The
    # egress network must be its route out (gw_priority; older daemons take the first by name).
    networks = [{"name": Ref(egress.key, "name"), "gw_priority": gateway_plan.OUTBOUND_GW_PRIORITY}]
    pool_networks = tuple(keys.networks[p.pool] for p in gw.pools)
    # Squid as an unprivileged user with no capabilities: a compromised proxy holds nothing a sandbox does not.
    _role(out, keys, plan, base, HOST_ROLES["gateway"], target=gateway_plan.LOG_DIR, volume_name=gw.log_volume,
          container_name=gw.container_name, run=gw.run, memory_mb=gateway_plan.MEMORY_MB,
          cpus=gateway_plan.CPUS, command=["sh", "-c", gateway_plan.ENTRYPOINT], user=gateway_plan.USER, init=True,
          envs=gw.env, config=gw.config, joins_from=pool_networks,
          labels_after=joined_label(pool_networks),
          networks_advanced=networks, tmpfs=dict(gateway_plan.TMPFS), cgroup_parent=gw.cgroup_parent,
          # Its lookups through the host's logging resolver (logged, checked), never the host's own resolvers.
          dns=[gw.resolver] if gw.resolver else None)


def _ingress(out: Tree, keys: HostKeys, plan: HostPlan, base: str) -> None:
    ing = plan.ingress
    assert ing is not None
    # The host's URLs: a reverse proxy on the pool networks with url ports, after the guard closed them.
    role = HOST_ROLES["ingress"]
    parent = _component(out, keys, plan, base, role)
    wake = ing.wake
    # With a runtime on the host, a fixed subnet and the ingress's own fixed address on it (it reaches the runtime by
    # the runtime's socket, not over this network).
    net_part = role.part("network")
    net = out.add(Node(part_name(base, net_part), NETWORK, parent, keys.provider, inputs(
        name=ing.network, internal=False, driver="bridge", options=bridge_options(ing.bridge, icc=True),
        ipam_configs=[inputs(subnet=str(wake.subnet), gateway=wake.runtime_address, ip_range=wake.ip_range)]
        if wake else None,
        labels=label_list({**plan.labels, LABEL_ROLE: role.name})),
        Options(delete_before_replace=True, depends_on=(keys.guard,))), part_about(net_part, plan.host))
    mounts = None
    if ing.spec.acme_email:
        data_part = role.part("volume")
        data = out.add(Node(part_name(base, data_part), VOLUME, parent, keys.provider,
                            inputs(name=ing.data_volume, labels=label_list(plan.labels)),
                            Options(delete_before_replace=True)), part_about(data_part, plan.host))
        mounts = [{"type": "volume", "source": Ref(data.key, "name"), "target": ingress_plan.DATA_DIR}]
    uploads = None
    if ing.spec.tls:
        uploads = [{"file": f"{ingress_plan.TLS_DIR}/{file}", "content": Secret(ref.secret), "permissions": "0400",
                    "owner": "65534", "group": "65534"}
                   for file, ref in (("cert.pem", ing.spec.tls.cert), ("key.pem", ing.spec.tls.key))]
    # Its own network only: its reload container joins it to each url pool's network, at the address the guard
    # opens to that pool's url ports, so a url port added or taken off leaves it serving the other sites.
    pool_networks = tuple(keys.networks[pool] for pool, _ in ing.pools)
    if wake:  # the runtime's configuration volume, read-only: its socket (sandstack.spec.contract.WAKE_SOCKET)
        runtime_config = part_key(base, HOST_ROLES["runtime"].part("volume", config=True))
        mounts = [*(mounts or []), {"type": "volume", "source": Ref(runtime_config, "name"),
                                    "target": INGRESS_RUNTIME_DIR, "read_only": True}]
    container = {"mounts": mounts or []}
    config_volume = _config_volume(out, keys, plan, base, role, parent, container)
    service = _container(out, keys, plan, base, role, parent, container_name=ing.container_name, run=ing.run,
                         memory_mb=ingress_plan.MEMORY_MB, cpus=ingress_plan.CPUS,
                         command=["sh", "-c", ingress_plan.ENTRYPOINT], after_guard=True,
                         user=ingress_plan.USER, init=True, envs=[*ing.env, *([wake_token(plan)] if wake else [])],
                         networks_advanced=[inputs(name=Ref(net.key, "name"),
                                                   ipv4_address=wake.ingress_address if wake else None)],
                         labels_after=joined_label(pool_networks),
                         ports=[{"internal": inside, "external": outside, "ip": ing.bind_ip, "protocol": "tcp"}
                                for inside, outside in ing.ports],
                         uploads=uploads, tmpfs=ing.tmpfs, mounts=container["mounts"], dns=ing.dns)
    _reload(out, keys, plan, base, role, parent, ing.config, service, ing.container_name, config_volume,
            pool_networks)


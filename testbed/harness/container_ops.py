"""Applies a ContainerPlan to the daemon the way the provider does, and reads the outputs back.

create  = resourceDockerContainerCreate (funcs.go:43-674): create on network_mode, disconnect `bridge`
          and connect networks_advanced, upload files, start, wait for healthy, attach and collect logs.
read    = resourceDockerContainerRead (funcs.go:750-981): the computed outputs components consume.
update  = resourceDockerContainerUpdate (funcs.go:991-1077): must_run, restart policy and resources.
delete  = resourceDockerContainerDelete (funcs.go:1079-1131): stop (grace), force-remove.
`funcs.go` is internal/provider/resource_docker_container_funcs.go of terraform-provider-docker v4.5.0.
"""

from __future__ import annotations

import time
from decimal import Decimal

import docker.errors

from testbed.provider.container_fields import upload_tar
from testbed.provider.container_map import ContainerPlan
from testbed.provider.schema import MiB
from testbed.provider.mocks import HarnessError

# Containers attached with `attach` must exit by then (the provider's create timeout is 20 minutes).
ATTACH_TIMEOUT_SECONDS = 600
# What the provider ignores when disconnecting `bridge` (funcs.go:464-468, helpers.go:113-121).
PROVIDER_IGNORED_DISCONNECT = "is not connected to the network bridge"


class PartialCreateError(HarnessError):
    """Creation failed after the container existed: it is kept (tainted) so the next run replaces it."""

    def __init__(self, message: str, container_id: str):
        super().__init__(message)
        self.partial_id = container_id


def ensure_local_image(api, image: str, urn: str) -> None:
    # findImage (image_funcs.go:343-378) pulls when the image is missing; the harness never pulls.
    try:
        api.inspect_image(image)
    except docker.errors.ImageNotFound:
        raise HarnessError(f"{urn}: image {image!r} is not present on this daemon and the harness never pulls; "
                           f"build it first (testbed/images.py) or from a RemoteImage with build") from None


def create(api, plan: ContainerPlan, labels: dict[str, str], urn: str) -> str:
    ensure_local_image(api, plan.config["Image"], urn)
    try:
        cid = api.create_container_from_config(plan.body(labels), name=plan.name, platform=plan.platform)["Id"]
    except docker.errors.APIError as error:
        raise HarnessError(f"{urn}: Unable to create container: {error.explanation or error}") from None
    try:
        _connect_networks(api, cid, plan)
        for upload in plan.uploads:
            # One tar per file, extracted at "/" (funcs.go:547-580).
            api.put_archive(cid, "/", upload_tar(upload))
        if plan.start:
            api.start(cid)
            if plan.wait:
                _wait_healthy(api, cid, plan.wait_timeout)
        return cid
    except (docker.errors.APIError, HarnessError, OSError) as error:
        detail = getattr(error, "explanation", None) or str(error)
        raise PartialCreateError(f"{urn}: container {cid[:12]} created but not completed: {detail}", cid) from None


def attach_and_collect(api, cid: str, plan: ContainerPlan) -> str | None:
    """`attach`: wait for the end of execution; `logs`: stdout+stderr as one string (funcs.go:631-671)."""
    if not plan.attach:
        return None
    api.wait(cid, timeout=ATTACH_TIMEOUT_SECONDS)
    if not plan.logs:
        return None
    return api.logs(cid, stdout=True, stderr=True).decode(errors="replace")


def _connect_networks(api, cid: str, plan: ContainerPlan) -> None:
    if not plan.endpoints:
        return
    try:
        api.disconnect_container_from_network(cid, "bridge")
    except docker.errors.APIError as error:
        message = error.explanation or str(error)
        if PROVIDER_IGNORED_DISCONNECT not in message.lower():
            raise HarnessError(f"Unable to disconnect the default network: {message}") from None
    for name, endpoint in plan.endpoints:
        try:  # POST /networks/{id}/connect with the EndpointSettings the provider builds
            api._post_json(api._url("/networks/{0}/connect", name), data={"Container": cid, "EndpointConfig": endpoint})
        except docker.errors.APIError as error:
            raise HarnessError(f"Unable to connect to network '{name}': {error.explanation or error}") from None


def _wait_healthy(api, cid: str, timeout: int) -> None:
    # funcs.go:590-628: poll until Health.Status == healthy; no healthcheck at all is an error.
    deadline = time.monotonic() + timeout
    while True:
        health = (api.inspect_container(cid).get("State") or {}).get("Health")
        if health is None:
            raise HarnessError("you have supplied a 'wait' argument, but the container does not have a "
                               "healthcheck defined (provider error)")
        if health.get("Status") == "healthy":
            return
        if time.monotonic() > deadline:
            last = (health.get("Log") or [{}])[-1].get("Output", "").strip()[:300]
            raise HarnessError(f"container failed to be in healthy state within {timeout}s "
                               f"(status {health.get('Status')}; last check output: {last!r})")
        time.sleep(0.25)


def read(api, cid: str, inputs: dict, plan: ContainerPlan, container_logs: str | None) -> dict:
    """Outputs = inputs + what resourceDockerContainerRead sets from the inspect data."""
    info = api.inspect_container(cid)
    state, config, host, net = info["State"], info["Config"], info["HostConfig"], info.get("NetworkSettings") or {}
    out = dict(inputs)
    out.update(
        name=info["Name"].lstrip("/"), hostname=config.get("Hostname"), domainname=config.get("Domainname"),
        bridge=net.get("Bridge", ""), networkDatas=_network_data(net),
        image=info["Image"] if str(inputs.get("image", "")).startswith("sha256:") else config.get("Image"),
        command=config.get("Cmd") or [], entrypoints=config.get("Entrypoint") or [], user=config.get("User", ""),
        workingDir=config.get("WorkingDir", ""), init=bool(host.get("Init")), readOnly=host.get("ReadonlyRootfs"),
        restart=host["RestartPolicy"]["Name"], maxRetryCount=host["RestartPolicy"]["MaximumRetryCount"],
        memory=host.get("Memory", 0) // MiB, shmSize=host.get("ShmSize", 0) // MiB,
        memorySwap=_mb_or_raw(host.get("MemorySwap", 0)), memoryReservation=_mb_or_raw(host.get("MemoryReservation", 0)),
        cpuShares=host.get("CpuShares", 0), cpuSet=host.get("CpusetCpus", ""), runtime=host.get("Runtime", ""),
        networkMode=host.get("NetworkMode", ""), logDriver=host["LogConfig"]["Type"],
        securityOpts=host.get("SecurityOpt") or [], privileged=host.get("Privileged", False),
        stopSignal=config.get("StopSignal", ""), stopTimeout=config.get("StopTimeout"), rm=host.get("AutoRemove", False),
    )
    if host.get("NanoCpus"):  # nanoInt64ToDecimalString
        out["cpus"] = _decimal(host["NanoCpus"])
    if state.get("Running") or out.get("mustRun", True):
        if inputs.get("ports"):  # funcs.go:800-806: the bound host ports, random ones included
            out["ports"] = _ports(net.get("Ports") or {})
    if not state.get("Running"):
        out["exitCode"] = state.get("ExitCode")
        if out.get("mustRun", True):  # funcs.go:815-824: drift that makes the next run start it again
            out["mustRun"] = False
    if container_logs is not None:
        out["containerLogs"] = container_logs
    return out


def _mb_or_raw(value: int) -> int:
    return value // MiB if value > 0 else value


def _decimal(nano: int) -> str:
    return format((Decimal(nano) / Decimal(10**9)).normalize(), "f")


def _network_data(net: dict) -> list[dict]:
    # structures.go flattenContainerNetworks (61-81).
    return [{"networkName": name, "ipAddress": data.get("IPAddress", ""), "ipPrefixLength": data.get("IPPrefixLen", 0),
             "gateway": data.get("Gateway", ""), "globalIpv6Address": data.get("GlobalIPv6Address", ""),
             "globalIpv6PrefixLength": data.get("GlobalIPv6PrefixLen", 0), "ipv6Gateway": data.get("IPv6Gateway", ""),
             "macAddress": data.get("MacAddress", "")} for name, data in sorted((net.get("Networks") or {}).items())]


def _ports(bindings: dict) -> list[dict]:
    # structures.go flattenContainerPorts (35-59): sorted by internal port.
    out = []
    for key in sorted(bindings, key=lambda k: int(k.split("/")[0])):
        internal, protocol = key.split("/")
        for binding in bindings[key] or []:
            out.append({"internal": int(internal), "external": int(binding.get("HostPort") or 0),
                        "ip": binding.get("HostIp", ""), "protocol": protocol})
    return out


def update(api, cid: str, plan: ContainerPlan, changed: set[str], start_again: bool) -> None:
    """Only what resourceDockerContainerUpdate applies; STATE_ONLY changes are deliberately not applied."""
    if start_again and plan.start:  # must_run false -> true (funcs.go:997-1013)
        api.start(cid)
    resource_fields = {"restart", "maxRetryCount", "cpuShares", "memory", "memoryReservation", "cpuSet", "memorySwap",
                       "deviceReadBps", "deviceReadIops", "deviceWriteBps", "deviceWriteIops"}
    if not changed & resource_fields:
        return
    host = plan.host
    body = {"RestartPolicy": host["RestartPolicy"], "CpuShares": host.get("CpuShares", 0),
            "Memory": host.get("Memory", 0), "MemoryReservation": host.get("MemoryReservation", 0),
            "CpusetCpus": host.get("CpusetCpus", "")}
    for key in ("BlkioDeviceReadBps", "BlkioDeviceReadIOps", "BlkioDeviceWriteBps", "BlkioDeviceWriteIOps", "MemorySwap"):
        if key in host:
            body[key] = host[key]
    response = api._post_json(api._url("/containers/{0}/update", cid), data=body)  # ContainerUpdate
    api._raise_for_status(response)


def delete(api, cid: str, plan: ContainerPlan) -> str:
    if not plan.attach:  # funcs.go:1085-1098: stop with destroy_grace_seconds (0 = kill at once)
        try:
            api.stop(cid, timeout=plan.destroy_grace_seconds)
        except docker.errors.NotFound:
            return "already gone"
    try:
        api.remove_container(cid, v=plan.remove_volumes, force=True)
    except docker.errors.NotFound:
        return "already gone"
    except docker.errors.APIError as error:
        if "is already in progress" not in str(error):
            raise
    return "removed"

"""Compound `Container` inputs: ports, networks, mounts, uploads, devices, GPUs.

Each handler mirrors terraform-provider-docker v4.5.0 (`funcs.go` = resource_docker_container_funcs.go,
`structures.go` = resource_docker_container_structures.go) and writes into a ContainerPlan.
"""

from __future__ import annotations

import base64
import binascii
import csv
import grp
import pwd
import time
from dataclasses import dataclass
from typing import Any

from testbed.provider.schema import LABEL_SUB, Ctx, label_map

PORT_SUB = {"internal": None, "external": None, "ip": None, "protocol": None}
NETWORK_SUB = {"name": None, "aliases": None, "ipv4Address": None, "ipv6Address": None, "linkLocalIps": None,
               "macAddress": None, "driverOpts": None, "gwPriority": None}
HOST_SUB = {"host": None, "ip": None}
ULIMIT_SUB = {"name": None, "soft": None, "hard": None}
MOUNT_SUB = {"target": None, "type": None, "source": None, "readOnly": None,
             "bindOptions": {"propagation": None},
             "volumeOptions": {"noCopy": None, "labels": LABEL_SUB, "driverName": None, "driverOptions": None,
                               "subpath": None},
             "tmpfsOptions": {"sizeBytes": None, "mode": None}}
VOLUME_SUB = {"containerPath": None, "fromContainer": None, "hostPath": None, "readOnly": None,
              "volumeName": None, "selinuxRelabel": None}
UPLOAD_SUB = {"file": None, "content": None, "contentBase64": None, "source": None, "sourceHash": None,
              "executable": None, "permissions": None, "owner": None, "group": None}
DEVICE_SUB = {"hostPath": None, "containerPath": None, "permissions": None}
DEVICE_REQUEST_SUB = {"driver": None, "count": None, "deviceIds": None, "capabilities": None, "options": None}
THROTTLE_SUB = {"path": None, "rate": None}

#: The provider refuses any volume_options block below this negotiated API version (funcs.go:219-225:
#: the `else` belongs to the version check, not to `subpath`). Relax it here if pulumi-docker's bundled
#: provider is shown to have fixed that.
VOLUME_OPTIONS_MIN_API = "1.45"


@dataclass(frozen=True)
class Upload:
    """One file written by the provider before start: a one-entry tar copied to "/" (funcs.go:505-582)."""

    path: str
    mode: int
    uid: int
    gid: int
    content: bytes | None   # None: read `source` when applied (the provider reads it at create time)
    source: str | None = None


def ports(plan, value: Any, ctx: Ctx) -> None:
    # structures.go portSetToDockerPorts (228-258). The schema defaults ip to "0.0.0.0" and protocol to
    # "tcp"; an absent external reads as 0, sent as HostPort "0" = a random free port.
    exposed, bindings = {}, {}
    for i, port in enumerate(ctx.as_list("ports", value)):
        internal = ctx.as_int(f"ports[{i}].internal", port.get("internal"), 1)
        key = f"{internal}/{ctx.as_str(f'ports[{i}].protocol', port.get('protocol', 'tcp'))}"
        exposed[key] = {}
        external = ctx.as_int(f"ports[{i}].external", port.get("external", 0), 0)
        bindings.setdefault(key, []).append(
            {"HostIp": ctx.as_str(f"ports[{i}].ip", port.get("ip", "0.0.0.0")), "HostPort": str(external)})
    if exposed:
        plan.config["ExposedPorts"] = exposed
        plan.host["PortBindings"] = bindings


def networks_advanced(plan, value: Any, ctx: Ctx) -> None:
    # funcs.go:462-503: created on network_mode, `bridge` disconnected, then each network connected.
    for i, net in enumerate(ctx.as_list("networksAdvanced", value)):
        where = f"networksAdvanced[{i}]"
        endpoint: dict[str, Any] = {"IPAMConfig": {
            "IPv4Address": ctx.as_str(f"{where}.ipv4Address", net.get("ipv4Address", "")),
            "IPv6Address": ctx.as_str(f"{where}.ipv6Address", net.get("ipv6Address", "")),
            "LinkLocalIPs": [ctx.as_str(f"{where}.linkLocalIps", v) for v in net.get("linkLocalIps", [])]}}
        if net.get("aliases"):
            endpoint["Aliases"] = [ctx.as_str(f"{where}.aliases", a) for a in net["aliases"]]
        if net.get("macAddress"):
            endpoint["MacAddress"] = ctx.as_str(f"{where}.macAddress", net["macAddress"])
        if net.get("driverOpts"):  # "k=v" strings -> map (structures.go stringSetToMapStringString)
            endpoint["DriverOpts"] = dict(o.split("=", 1) for o in net["driverOpts"] if "=" in o)
        if net.get("gwPriority"):  # Engine API 1.48+: an older daemon ignores the field
            endpoint["GwPriority"] = ctx.as_int(f"{where}.gwPriority", net["gwPriority"])
            if not ctx.api_at_least("1.48"):
                plan.notes.append(f"{where}.gwPriority is ignored by this daemon (API {ctx.api_version} < 1.48)")
        plan.endpoints.append((ctx.as_str(f"{where}.name", net.get("name")), endpoint))


def hosts(plan, value: Any, ctx: Ctx) -> None:
    # structures.go extraHostsSetToContainerExtraHosts: "host:ip".
    plan.host["ExtraHosts"] = [f"{h.get('host')}:{h.get('ip')}" for h in ctx.as_list("hosts", value)]


def ulimits(plan, value: Any, ctx: Ctx) -> None:
    plan.host["Ulimits"] = [  # structures.go ulimitsToDockerUlimits
        {"Name": ctx.as_str(f"ulimits[{i}].name", u.get("name")),
         "Soft": ctx.as_int(f"ulimits[{i}].soft", u.get("soft")),
         "Hard": ctx.as_int(f"ulimits[{i}].hard", u.get("hard"))}
        for i, u in enumerate(ctx.as_list("ulimits", value))]


def mounts(plan, value: Any, ctx: Ctx) -> None:
    # funcs.go:166-248. Options blocks only count for their own mount type; others are ignored.
    out = []
    for i, raw in enumerate(ctx.as_list("mounts", value)):
        where = f"mounts[{i}]"
        kind = ctx.as_str(f"{where}.type", raw.get("type"))
        mount: dict[str, Any] = {"Type": kind, "Target": ctx.as_str(f"{where}.target", raw.get("target")),
                                 "Source": ctx.as_str(f"{where}.source", raw.get("source", "")),
                                 "ReadOnly": ctx.as_bool(f"{where}.readOnly", raw.get("readOnly", False))}
        for block, wanted in (("bindOptions", "bind"), ("volumeOptions", "volume"), ("tmpfsOptions", "tmpfs")):
            if raw.get(block) and kind != wanted:
                plan.notes.append(f"{where}.{block} ignored for a {kind} mount (as the provider does)")
        if kind == "bind" and raw.get("bindOptions"):
            mount["BindOptions"] = {"Propagation": raw["bindOptions"].get("propagation", "")}
        elif kind == "volume" and raw.get("volumeOptions"):
            if not ctx.api_at_least(VOLUME_OPTIONS_MIN_API):
                ctx.fail(f"{where}.volumeOptions", raw["volumeOptions"],
                         f"the provider refuses every volume_options block when the daemon API is below "
                         f"{VOLUME_OPTIONS_MIN_API} (funcs.go:219-225; this daemon: {ctx.api_version}); "
                         f"drop volumeOptions or use a volume created with the wanted driver options")
            opts = raw["volumeOptions"]
            options: dict[str, Any] = {"NoCopy": bool(opts.get("noCopy", False))}
            if opts.get("labels"):
                options["Labels"] = label_map(ctx, f"{where}.volumeOptions.labels", opts["labels"])
            if opts.get("driverName") or opts.get("driverOptions"):
                options["DriverConfig"] = {"Name": opts.get("driverName", ""), "Options": opts.get("driverOptions", {})}
            if opts.get("subpath"):
                options["Subpath"] = opts["subpath"]
            mount["VolumeOptions"] = options
        elif kind == "tmpfs" and raw.get("tmpfsOptions"):
            opts = raw["tmpfsOptions"]
            mount["TmpfsOptions"] = {"SizeBytes": ctx.as_int(f"{where}.tmpfsOptions.sizeBytes", opts.get("sizeBytes", 0)),
                                     "Mode": ctx.as_int(f"{where}.tmpfsOptions.mode", opts.get("mode", 0))}
        out.append(mount)
    plan.host["Mounts"] = out


def volumes(plan, value: Any, ctx: Ctx) -> None:
    # structures.go volumeSetToDockerVolumes (289-329): binds "src:dst:rw|ro[,relabel]" or volumes-from.
    binds, anonymous, volumes_from = [], {}, []
    for i, vol in enumerate(ctx.as_list("volumes", value)):
        source = vol.get("hostPath") or vol.get("volumeName") or ""
        target = vol.get("containerPath", "")
        if vol.get("fromContainer") and target:
            ctx.fail(f"volumes[{i}]", vol, "both a container and a path specified in a volume entry")
        if vol.get("fromContainer"):
            volumes_from.append(vol["fromContainer"])
        elif not target:
            ctx.fail(f"volumes[{i}]", vol, "volume entry without container path or source container")
        else:
            anonymous[target] = {}
            if source:
                mode = "ro" if vol.get("readOnly") else "rw"
                binds.append(f"{source}:{target}:{mode}" + (f",{vol['selinuxRelabel']}" if vol.get("selinuxRelabel") else ""))
    plan.config["Volumes"] = anonymous
    plan.host.update({"Binds": binds} if binds else {})
    plan.host.update({"VolumesFrom": volumes_from} if volumes_from else {})


def _host_id(ctx: Ctx, path: str, value: Any, kind: str) -> int:
    # pulumi-docker 5.2 ContainerUploadArgs.owner/group (upstream after v4.5.0, issue #996): numeric IDs
    # are used as is, names resolve in the user/group database of the machine running the provider --
    # NOT the container's. Prefer numeric IDs in components.
    text = ctx.as_str(path, value)
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid if kind == "user" else grp.getgrnam(text).gr_gid
    except KeyError:
        ctx.fail(path, value, f"no {kind} of that name on the provider's host; use a numeric id")


def uploads(plan, value: Any, ctx: Ctx) -> None:
    for i, up in enumerate(ctx.as_list("uploads", value)):
        where = f"uploads[{i}]"
        given = [k for k in ("content", "contentBase64", "source") if up.get(k)]
        if len(given) != 1:  # funcs.go:513-526
            ctx.fail(where, up, "exactly one of content, contentBase64, source must be set")
        if up.get("permissions"):  # funcs.go:549-558: permissions (octal) beat executable
            try:
                mode = int(ctx.as_str(f"{where}.permissions", up["permissions"]), 8)
            except ValueError:
                ctx.fail(f"{where}.permissions", up["permissions"], "not an octal mode such as 0644")
        else:
            mode = 0o744 if up.get("executable") else 0o644
        content = None
        if up.get("content"):
            content = ctx.as_str(f"{where}.content", up["content"]).encode()
        elif up.get("contentBase64"):
            try:  # the provider drops decode errors and uploads nothing; refuse instead
                content = base64.b64decode(up["contentBase64"], validate=True)
            except (binascii.Error, ValueError):
                ctx.fail(f"{where}.contentBase64", up["contentBase64"], "not valid base64")
        uid = _host_id(ctx, f"{where}.owner", up["owner"], "user") if up.get("owner") else 0
        gid = _host_id(ctx, f"{where}.group", up["group"], "group") if up.get("group") else 0
        plan.uploads.append(Upload(ctx.as_str(f"{where}.file", up.get("file")), mode, uid, gid, content,
                                   up.get("source")))


def upload_tar(upload: Upload) -> bytes:
    """The provider's tar: ONE regular-file header named by `file` (absolute), no directory entries,
    mode as computed, owner from owner/group (else 0:0), mtime now (funcs.go:547-573). Missing parent
    directories are created by the daemon's extraction (root-owned)."""
    import io
    import tarfile

    data = upload.content
    if data is None:
        with open(upload.source, "rb") as handle:  # funcs.go:536-542: read at create time
            data = handle.read()
    info = tarfile.TarInfo(upload.path)
    info.size, info.mode, info.mtime, info.uid, info.gid = len(data), upload.mode, time.time(), upload.uid, upload.gid
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def devices(plan, value: Any, ctx: Ctx) -> None:
    plan.host["Devices"] = [  # structures.go deviceSetToDockerDevices: container_path defaults to host_path
        {"PathOnHost": d.get("hostPath"), "PathInContainer": d.get("containerPath") or d.get("hostPath"),
         "CgroupPermissions": d.get("permissions", "rwm")} for d in ctx.as_list("devices", value)]


def device_requests(plan, value: Any, ctx: Ctx) -> None:
    if "gpus" in ctx.inputs:  # schema ConflictsWith
        ctx.fail("deviceRequests", value, "conflicts with gpus (provider schema ConflictsWith)")
    out = []
    for i, req in enumerate(ctx.as_list("deviceRequests", value)):  # structures.go deviceRequestsSetToDockerRequests
        item: dict[str, Any] = {"Driver": req.get("driver", "cdi"),
                                "Count": ctx.as_int(f"deviceRequests[{i}].count", req.get("count", 0))}
        if req.get("deviceIds"):
            item["DeviceIDs"] = list(req["deviceIds"])
        if req.get("capabilities"):
            item["Capabilities"] = [list(req["capabilities"])]
        if req.get("options"):
            item["Options"] = ctx.as_map(f"deviceRequests[{i}].options", req["options"])
        out.append(item)
    plan.host["DeviceRequests"] = out


def gpus(plan, value: Any, ctx: Ctx) -> None:
    # funcs.go:417-428 + normalizeGPUOptionString (705-718) + docker/cli opts.GpuOpts.Set.
    text = ctx.as_str("gpus", value).strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    request: dict[str, Any] = {"Driver": "", "Count": 0}
    seen: set[str] = set()
    for part in next(csv.reader([text])):
        key, has_value, val = part.partition("=")
        if key in seen:
            ctx.fail("gpus", value, f"gpu request key '{key}' can be specified only once")
        seen.add(key)
        if not has_value:
            seen.add("count")
            request["Count"] = _gpu_count(ctx, value, key)
        elif key == "driver":
            request["Driver"] = val
        elif key == "count":
            request["Count"] = _gpu_count(ctx, value, val)
        elif key == "device":
            request["DeviceIDs"] = val.split(",")
        elif key == "capabilities":
            request["Capabilities"] = [val.split(",") + ["gpu"]]
        elif key == "options":
            request["Options"] = dict(kv.split("=", 1) for kv in next(csv.reader([val])) if "=" in kv)
        else:
            ctx.fail("gpus", value, f"unexpected key '{key}' in '{part}'")
    if "count" not in seen and "DeviceIDs" not in request:
        request["Count"] = 1
    request.setdefault("Options", {})
    request.setdefault("Capabilities", [["gpu"]])
    plan.host["DeviceRequests"] = [request]


def _gpu_count(ctx: Ctx, value: Any, text: str) -> int:
    if text == "all":
        return -1
    if not text.lstrip("-").isdigit():
        ctx.fail("gpus", value, f'invalid count ({text}): value must be either "all" or an integer')
    return int(text)


def throttle(api_key: str):
    def apply(plan, value: Any, ctx: Ctx) -> None:  # structures.go throttleDeviceSetToDockerThrottleDevices
        plan.host[api_key] = [{"Path": t.get("path"), "Rate": ctx.as_int(f"{api_key}.rate", t.get("rate"), 0)}
                              for t in ctx.as_list(api_key, value)]
    return apply

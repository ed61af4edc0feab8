"""Field tables of `Network`, `Volume`, `RemoteImage` and `RegistryImage`, and their translation to Engine API calls.

Network mirrors resourceDockerNetworkCreate (resource_docker_network_funcs.go:26-82, every input
ForceNew); Volume mirrors resourceDockerVolumeCreate (resource_docker_volume.go:166-185, all but
`cluster` ForceNew); RemoteImage mirrors resourceDockerImageCreate / legacyBuildDockerImage /
createImageBuildOptions (resource_docker_image_funcs.go:34-56, 380-452;
resource_docker_registry_image_funcs.go:161-246). All terraform-provider-docker v4.5.0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.provider.schema import LABEL_SUB, STATE_ONLY, Ctx, Field, ResourceMapping, label_map


# --- Network -----------------------------------------------------------------------------------------

def _network_plan(ctx: Ctx) -> dict:
    # The body of POST /networks/create. CheckDuplicate is not sent (network.CreateOptions{} zero value),
    # so this daemon accepts a second network with the same name, as it would from the provider.
    return {"Name": ctx.inputs.get("name") or ctx.autoname, "Driver": None, "Options": None, "IPAM": None,
            "Internal": False, "Attachable": None, "Ingress": None, "EnableIPv6": False, "Labels": None}


def _ipam(body: dict) -> dict:
    body["IPAM"] = body["IPAM"] or {"Driver": "default", "Config": [], "Options": {}}
    return body["IPAM"]


def _set(key: str, kind: str):
    def apply(body: dict, value: Any, ctx: Ctx) -> None:
        body[key] = ctx.as_bool(key, value) if kind == "bool" else (
            ctx.as_map(key, value) if kind == "map" else ctx.as_str(key, value))
    return apply


def _ipam_driver(body: dict, value: Any, ctx: Ctx) -> None:
    _ipam(body)["Driver"] = ctx.as_str("ipamDriver", value)


def _ipam_options(body: dict, value: Any, ctx: Ctx) -> None:
    _ipam(body)["Options"] = ctx.as_map("ipamOptions", value)


def _ipam_configs(body: dict, value: Any, ctx: Ctx) -> None:
    # ipamConfigSetToIpamConfigs (network_funcs.go:137-158): empty strings for absent keys.
    _ipam(body)["Config"] = [
        {"Subnet": c.get("subnet", ""), "IPRange": c.get("ipRange", ""), "Gateway": c.get("gateway", ""),
         "AuxiliaryAddresses": ctx.as_map(f"ipamConfigs[{i}].auxAddress", c.get("auxAddress", {}))}
        for i, c in enumerate(ctx.as_list("ipamConfigs", value))]


def _labels(body: dict, value: Any, ctx: Ctx) -> None:
    body["Labels"] = label_map(ctx, "labels", value)


NETWORK = ResourceMapping("docker:index/network:Network", (
    Field("name", None, doc="absent -> pulumi autoname `<logical name>-<7 hex>`"),
    Field("driver", _set("Driver", "str")),
    Field("options", _set("Options", "map"),
          doc="driver options, e.g. com.docker.network.bridge.name to name the host bridge"),
    Field("internal", _set("Internal", "bool"), doc="no route out of the network"),
    Field("attachable", _set("Attachable", "bool")),
    Field("ingress", _set("Ingress", "bool")),
    Field("ipv6", _set("EnableIPv6", "bool")),
    Field("ipamDriver", _ipam_driver), Field("ipamOptions", _ipam_options),
    Field("ipamConfigs", _ipam_configs, sub={"subnet": None, "ipRange": None, "gateway": None, "auxAddress": None}),
    Field("labels", _labels, sub=LABEL_SUB),
), _network_plan, autoname=True, module="testbed/provider/other_maps.py")


# --- Volume ------------------------------------------------------------------------------------------

def _volume_plan(ctx: Ctx) -> dict:
    return {"Name": ctx.inputs.get("name") or ctx.autoname, "Driver": "local", "DriverOpts": {}, "Labels": {}}


VOLUME = ResourceMapping("docker:index/volume:Volume", (
    Field("name", None, doc="absent -> pulumi autoname; the volume id is its name"),
    Field("driver", _set("Driver", "str")),
    Field("driverOpts", _set("DriverOpts", "map")),
    Field("labels", _labels, sub=LABEL_SUB),
), _volume_plan, autoname=True, module="testbed/provider/other_maps.py")


# --- RemoteImage -------------------------------------------------------------------------------------

@dataclass
class ImagePlan:
    name: str
    build: dict | None = None           # Docker SDK APIClient.build() keyword arguments
    extra_tags: list[str] = field(default_factory=list)
    build_log_file: str | None = None
    keep_locally: bool = False
    force_remove: bool = False


def _image_plan(ctx: Ctx) -> ImagePlan:
    return ImagePlan(name=ctx.as_str("name", ctx.inputs.get("name")))


BUILD_SUB = {"context": None, "dockerfile": None, "buildArgs": None, "labels": None, "target": None, "tags": None,
             "noCache": None, "remove": None, "forceRemove": None, "pullParent": None, "networkMode": None,
             "shmSize": None, "memory": None, "memorySwap": None, "cpuShares": None, "cpuSetCpus": None,
             "extraHosts": None, "platform": None, "cacheFroms": None, "isolation": None,
             "suppressOutput": None, "buildLogFile": None, "useLegacyBuilder": None}


def _build(plan: ImagePlan, value: Any, ctx: Ctx) -> None:
    # The provider builds with buildx when it can (docker_buildx_build.go canUseBuildx) and falls back to
    # the legacy builder; the harness always uses the daemon's classic builder through the Engine API,
    # with the legacy mapping (createImageBuildOptions). Note the units: build.memory, memorySwap and
    # shmSize are BYTES here (no MB conversion, unlike Container).
    if value.get("pullParent"):
        ctx.fail("build.pullParent", True, "would pull the base image from a registry; none exists here")
    limits = {k: ctx.as_int(f"build.{w}", value[w]) for w, k in (("memory", "memory"), ("memorySwap", "memswap"),
              ("cpuShares", "cpushares")) if value.get(w)}
    if value.get("cpuSetCpus"):
        limits["cpusetcpus"] = ctx.as_str("build.cpuSetCpus", value["cpuSetCpus"])
    plan.build = {
        "path": ctx.as_str("build.context", value.get("context")),
        "dockerfile": value.get("dockerfile", "Dockerfile"),       # schema default
        "buildargs": ctx.as_map("build.buildArgs", value.get("buildArgs", {})),
        "labels": ctx.as_map("build.labels", value.get("labels", {})),
        "target": value.get("target") or None, "nocache": bool(value.get("noCache", False)),
        "rm": bool(value.get("remove", True)), "forcerm": bool(value.get("forceRemove", False)),
        "network_mode": value.get("networkMode") or None,
        "shmsize": ctx.as_int("build.shmSize", value["shmSize"]) if value.get("shmSize") else None,
        "container_limits": limits or None, "extra_hosts": _extra_hosts(value.get("extraHosts")),
        "platform": value.get("platform") or None, "cache_from": value.get("cacheFroms") or None,
        "isolation": value.get("isolation") or None,
        "pull": False, "use_config_proxy": False,  # never reach a registry; no proxy args from ~/.docker
    }
    plan.extra_tags = list(value.get("tags", []))  # tags = [name] + build.tags (legacyBuildDockerImage)
    plan.build_log_file = value.get("buildLogFile") or None


def _extra_hosts(hosts: list[str] | None) -> dict | None:
    if not hosts:
        return None
    return dict(h.split(":", 1) for h in hosts)


def _keep(attr: str, wire: str):
    def apply(plan: ImagePlan, value: Any, ctx: Ctx) -> None:
        setattr(plan, attr, ctx.as_bool(wire, value))
    return apply


def _platform(plan: ImagePlan, value: Any, ctx: Ctx) -> None:
    if value:  # findImage(platform) only matters for a pull; the harness never pulls
        ctx.fail("platform", value, "only used to pull a platform variant; the harness never pulls")


REMOTE_IMAGE = ResourceMapping("docker:index/remoteImage:RemoteImage", (
    Field("name", None, doc="image name[:tag]; without build it must already exist locally"),
    Field("build", _build, sub=BUILD_SUB, doc="nested fields are ForceNew: a change rebuilds (replace)"),
    Field("triggers", None, doc="any change replaces (rebuilds) the image"),
    Field("pullTriggers", None, doc="any change replaces the image; nothing is pulled"),
    Field("keepLocally", _keep("keep_locally", "keepLocally"), STATE_ONLY, doc="delete leaves the image"),
    Field("forceRemove", _keep("force_remove", "forceRemove"), STATE_ONLY, doc="delete uses force"),
    Field("platform", _platform),
), _image_plan, module="testbed/provider/other_maps.py")


# --- RegistryImage -----------------------------------------------------------------------------------
# resource_docker_registry_image.go (v4.5.0): `name` and `triggers` ForceNew, `keep_remotely` and
# `insecure_skip_verify` plain (stored, used at push or delete only); `build` and `auth_config` are refused here
# (sandstack pushes an image it built with RemoteImage, with the daemon's credentials).

@dataclass
class PushPlan:
    name: str
    keep_remotely: bool = False
    insecure_skip_verify: bool = False


def _push_plan(ctx: Ctx) -> PushPlan:
    return PushPlan(name=ctx.as_str("name", ctx.inputs.get("name")))


def _push_flag(attr: str, wire: str):
    def apply(plan: PushPlan, value: Any, ctx: Ctx) -> None:
        setattr(plan, attr, ctx.as_bool(wire, value))
    return apply


def _refused(path: str, reason: str):
    def apply(plan: PushPlan, value: Any, ctx: Ctx) -> None:
        ctx.fail(path, value, reason)
    return apply


REGISTRY_IMAGE = ResourceMapping("docker:index/registryImage:RegistryImage", (
    Field("name", None, doc="the local image name[:tag] pushed to its registry; a change pushes anew (replace)"),
    Field("triggers", None, doc="any change replaces (pushes again)"),
    Field("keepRemotely", _push_flag("keep_remotely", "keepRemotely"), STATE_ONLY,
          doc="delete leaves the pushed image in the registry"),
    Field("insecureSkipVerify", _push_flag("insecure_skip_verify", "insecureSkipVerify"), STATE_ONLY,
          doc="skips the registry's TLS verification at push/delete"),
    Field("build", _refused("build", "a RegistryImage build is deprecated upstream; sandstack builds with RemoteImage")),
    Field("authConfig", _refused("authConfig", "registry credentials come from the daemon's configuration here")),
), _push_plan, module="testbed/provider/other_maps.py")

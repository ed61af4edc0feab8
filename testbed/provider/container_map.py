"""`docker:index/container:Container`: the field table and its translation to the Engine API body.

Mirrors resourceDockerContainerCreate in terraform-provider-docker v4.5.0
internal/provider/resource_docker_container_funcs.go (cited below as `funcs.go:<line>`) and the helpers
in resource_docker_container_structures.go (`structures.go:<line>`). Change classes follow
resource_docker_container.go (ForceNew) and resourceDockerContainerUpdate (funcs.go:991-1077).
Compound fields (ports, mounts, uploads, networks, devices, gpus) are in container_fields.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from testbed.provider import container_fields as cf
from testbed.provider.schema import (LABEL_SUB, MiB, STATE_ONLY, UPDATE, Ctx, Field,
                                         ResourceMapping, go_duration_ns, label_map)


@dataclass
class ContainerPlan:
    """What the provider would send: create body, then connects, uploads, start, wait, attach."""

    name: str | None
    config: dict                      # Engine API container Config (HostConfig kept apart)
    host: dict                        # HostConfig
    platform: str | None = None
    endpoints: list[tuple[str, dict]] = field(default_factory=list)  # networks_advanced, in order
    uploads: list[cf.Upload] = field(default_factory=list)
    start: bool = True
    wait: bool = False
    wait_timeout: int = 60
    attach: bool = False
    logs: bool = False
    must_run: bool = True
    rm: bool = False
    destroy_grace_seconds: int = 0
    remove_volumes: bool = True
    notes: list[str] = field(default_factory=list)  # provider quirks met while translating

    def body(self, extra_labels: dict[str, str] | None = None) -> dict:
        config = dict(self.config)
        if extra_labels:
            config["Labels"] = {**config.get("Labels", {}), **extra_labels}
        return {**config, "HostConfig": self.host}


def new_plan(ctx: Ctx) -> ContainerPlan:
    # Values the provider always sends, even when the input is absent (funcs.go:69-77, 250-264, 447-448);
    # network_mode defaults to "bridge" in the schema, restart to "no".
    config = {"Image": "", "Hostname": "", "Domainname": "", "Tty": False, "OpenStdin": False,
              "StopSignal": ""}
    host = {"Privileged": False, "PublishAllPorts": False, "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
            "Runtime": "", "Mounts": [], "AutoRemove": False, "ReadonlyRootfs": False,
            "LogConfig": {"Type": "", "Config": {}}, "NetworkMode": "bridge", "Init": False}
    return ContainerPlan(name=ctx.inputs.get("name") or ctx.autoname, config=config, host=host)


# --- handler factories for the simple rows -----------------------------------------------------------

def cfg(key: str, kind: str = "str"):
    """Input -> Config[key] unchanged (type-checked)."""
    def apply(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
        plan.config[key] = _typed(ctx, key, value, kind)
    return apply


def hcfg(key: str, kind: str = "str"):
    """Input -> HostConfig[key] unchanged (type-checked)."""
    def apply(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
        plan.host[key] = _typed(ctx, key, value, kind)
    return apply


def flag(attr: str, wire: str, kind: str = "bool"):
    """Input that steers the provider's create/delete steps rather than the container body."""
    def apply(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
        setattr(plan, attr, _typed(ctx, wire, value, kind))
    return apply


def _typed(ctx: Ctx, path: str, value: Any, kind: str) -> Any:
    if kind == "bool":
        return ctx.as_bool(path, value)
    if kind == "int":
        return ctx.as_int(path, value)
    if kind == "list":
        return [ctx.as_str(f"{path}[{i}]", v) for i, v in enumerate(ctx.as_list(path, value))]
    if kind == "map":
        return ctx.as_map(path, value)
    return ctx.as_str(path, value)


def megabytes(key: str, minimum: int = 0, swap: bool = False):
    """Inputs in MB -> bytes; 0 means unset (d.GetOk); memory_swap -1 stays -1 (funcs.go:334-352)."""
    def apply(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
        number = ctx.as_int(key, value, minimum)
        if number > 0:
            plan.host[key] = number * MiB
        elif swap and number < 0:
            plan.host[key] = number
    return apply


# --- rows needing a few lines ------------------------------------------------------------------------

def _command(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    command = _typed(ctx, "command", value, "list")
    if "" in command:  # funcs.go:83-90
        ctx.fail("command", value, "values for command may not be empty (provider refuses)")
    plan.config["Cmd"] = command


def _cpus(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    # docker/cli opts.ParseCPUs (big.Rat) used at funcs.go:354-368: "1.5" -> 1500000000 NanoCpus.
    try:
        nano = Fraction(ctx.as_str("cpus", value).strip()) * 10**9
    except (ValueError, ZeroDivisionError):
        ctx.fail("cpus", value, "failed to parse as a rational number (docker/cli opts.ParseCPUs)")
    if nano.denominator != 1:
        ctx.fail("cpus", value, "value is too precise (more than 9 decimals)")
    plan.host["NanoCpus"] = int(nano)


def _cpu_period_quota(key: str):
    def apply(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
        number = ctx.as_int(key, value, 0)
        if "cpus" in ctx.inputs:  # funcs.go:362-368: cpus wins, period/quota only logged as ignored
            plan.notes.append(f"{key} ignored because cpus is set (provider logs a warning)")
        elif number:
            plan.host["CpuPeriod" if key == "cpuPeriod" else "CpuQuota"] = number
    return apply


def _cpu_set(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    text = ctx.as_str("cpuSet", value)
    if not re.fullmatch(r"\d+([,-]\d+)*", text):  # schema ValidateDiagFunc
        ctx.fail("cpuSet", value, r"must match ^\d+([,-]\d+)*$")
    plan.host["CpusetCpus"] = text


def _restart(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    text = ctx.as_str("restart", value)
    if text not in ("no", "on-failure", "always", "unless-stopped"):  # schema ValidateDiagFunc
        ctx.fail("restart", value, "must be one of no, on-failure, always, unless-stopped")
    plan.host["RestartPolicy"] = {**plan.host["RestartPolicy"], "Name": text}


def _max_retry(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.host["RestartPolicy"] = {**plan.host["RestartPolicy"], "MaximumRetryCount": ctx.as_int("maxRetryCount", value)}


def _labels(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.config["Labels"] = label_map(ctx, "labels", value)


def _healthcheck(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    # funcs.go:139-164. The provider ignores ParseDuration errors (-> 0); the harness refuses them
    # instead, because a silently disabled interval hides a component bug.
    check: dict[str, Any] = {"Test": _typed(ctx, "healthcheck.tests", value.get("tests", []), "list")}
    for key, api in (("interval", "Interval"), ("timeout", "Timeout"), ("startPeriod", "StartPeriod"),
                     ("startInterval", "StartInterval")):
        text = ctx.as_str(f"healthcheck.{key}", value.get(key, "0s"))
        nanos = go_duration_ns(text)
        if nanos is None:
            ctx.fail(f"healthcheck.{key}", text, "not a Go duration such as 5s, 500ms, 1m30s "
                     "(the provider would silently use 0)")
        check[api] = nanos
    check["Retries"] = ctx.as_int("healthcheck.retries", value.get("retries", 0), 0)
    plan.config["Healthcheck"] = check


def _security_opts(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    # funcs.go:327-332 + parseSystemPaths (686-703): systempaths=unconfined is client-side only.
    opts = _typed(ctx, "securityOpts", value, "list")
    plan.host["SecurityOpt"] = [o for o in opts if o != "systempaths=unconfined"]
    if "systempaths=unconfined" in opts:
        plan.host["MaskedPaths"], plan.host["ReadonlyPaths"] = [], []


def _capabilities(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.host["CapAdd"] = _typed(ctx, "capabilities.adds", value.get("adds", []), "list")  # funcs.go:286-293
    plan.host["CapDrop"] = _typed(ctx, "capabilities.drops", value.get("drops", []), "list")


def _log_driver(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.host["LogConfig"] = {**plan.host["LogConfig"], "Type": ctx.as_str("logDriver", value)}


def _log_opts(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.host["LogConfig"] = {**plan.host["LogConfig"], "Config": ctx.as_map("logOpts", value)}


def _cgroupns(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    text = ctx.as_str("cgroupnsMode", value)
    if text not in ("", "private", "host"):  # funcs.go:430-441
        ctx.fail("cgroupnsMode", value, "invalid CGROUP mode, must be either 'private', 'host' or empty")
    plan.host["CgroupnsMode"] = text


def _platform(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.platform = ctx.as_str("platform", value) or None  # ContainerCreate platform argument (funcs.go:60-67)


def _stop_timeout(plan: ContainerPlan, value: Any, ctx: Ctx) -> None:
    plan.config["StopTimeout"] = ctx.as_int("stopTimeout", value)


HEALTHCHECK_SUB = {"tests": None, "interval": None, "timeout": None, "startPeriod": None,
                   "startInterval": None, "retries": None}
F = Field
FIELDS = (
    F("image", cfg("Image"), doc="must exist locally: the harness never pulls (findImage would)"),
    F("name", None, doc="container name; absent -> pulumi autoname `<logical name>-<7 hex>`"),
    F("hostname", cfg("Hostname")), F("domainname", cfg("Domainname")),
    F("user", cfg("User")), F("workingDir", cfg("WorkingDir")),
    F("envs", cfg("Env", "list"), doc="list of K=V strings"),
    F("command", _command), F("entrypoints", cfg("Entrypoint", "list")),
    F("labels", _labels, sub=LABEL_SUB, doc="[{label, value}] -> Labels map (helpers.go labelSetToMap)"),
    F("stopSignal", cfg("StopSignal")), F("stopTimeout", _stop_timeout),
    F("tty", cfg("Tty", "bool")), F("stdinOpen", cfg("OpenStdin", "bool")),
    F("healthcheck", _healthcheck, STATE_ONLY, sub=HEALTHCHECK_SUB, doc="durations are Go strings -> ns"),
    F("ports", cf.ports, sub=cf.PORT_SUB, doc="ip defaults to 0.0.0.0, protocol to tcp, no external -> random"),
    F("publishAllPorts", hcfg("PublishAllPorts", "bool")),
    F("networkMode", hcfg("NetworkMode"), doc="the container is created here first (default bridge)"),
    F("networksAdvanced", cf.networks_advanced, sub=cf.NETWORK_SUB, doc="connected after create"),
    F("dns", hcfg("Dns", "list")), F("dnsOpts", hcfg("DnsOptions", "list")),
    F("dnsSearches", hcfg("DnsSearch", "list")), F("hosts", cf.hosts, sub=cf.HOST_SUB),
    F("memory", megabytes("Memory"), UPDATE, doc="MB"),
    F("memoryReservation", megabytes("MemoryReservation"), UPDATE, doc="MB"),
    F("memorySwap", megabytes("MemorySwap", -1, swap=True), UPDATE, doc="MB; == memory: no swap; -1 unlimited"),
    F("shmSize", megabytes("ShmSize"), doc="MB"),
    F("cpus", _cpus, doc='string such as "1.5" -> NanoCpus'),
    F("cpuShares", hcfg("CpuShares", "int"), UPDATE), F("cpuSet", _cpu_set, UPDATE),
    F("cpuPeriod", _cpu_period_quota("cpuPeriod"), STATE_ONLY),
    F("cpuQuota", _cpu_period_quota("cpuQuota"), STATE_ONLY),
    F("ulimits", cf.ulimits, sub=cf.ULIMIT_SUB),
    F("tmpfs", hcfg("Tmpfs", "map"), STATE_ONLY, doc="path -> mount options"),
    F("mounts", cf.mounts, sub=cf.MOUNT_SUB), F("volumes", cf.volumes, sub=cf.VOLUME_SUB),
    F("uploads", cf.uploads, sub=cf.UPLOAD_SUB, doc="one-file tars copied to / before start"),
    F("readOnly", hcfg("ReadonlyRootfs", "bool")), F("privileged", hcfg("Privileged", "bool")),
    F("capabilities", _capabilities, sub={"adds": None, "drops": None}),
    F("securityOpts", _security_opts), F("runtime", hcfg("Runtime")),
    F("init", hcfg("Init", "bool"), STATE_ONLY), F("rm", hcfg("AutoRemove", "bool"), STATE_ONLY),
    F("groupAdds", hcfg("GroupAdd", "list")), F("sysctls", hcfg("Sysctls", "map")),
    F("storageOpts", hcfg("StorageOpt", "map")), F("cgroupParent", hcfg("CgroupParent")),
    F("cgroupnsMode", _cgroupns), F("pidMode", hcfg("PidMode")), F("ipcMode", hcfg("IpcMode")),
    F("usernsMode", hcfg("UsernsMode")),
    F("restart", _restart, UPDATE), F("maxRetryCount", _max_retry, UPDATE),
    F("logDriver", _log_driver), F("logOpts", _log_opts),
    F("devices", cf.devices, sub=cf.DEVICE_SUB),
    F("deviceRequests", cf.device_requests, sub=cf.DEVICE_REQUEST_SUB),
    F("gpus", cf.gpus, doc="docker/cli GpuOpts syntax, e.g. all, device=0,1, count=2"),
    F("deviceCgroupRules", hcfg("DeviceCgroupRules", "list"),
      doc="added upstream after v4.5.0 (issue #975); HostConfig.DeviceCgroupRules"),
    F("deviceReadBps", cf.throttle("BlkioDeviceReadBps"), UPDATE, sub=cf.THROTTLE_SUB),
    F("deviceReadIops", cf.throttle("BlkioDeviceReadIOps"), UPDATE, sub=cf.THROTTLE_SUB),
    F("deviceWriteBps", cf.throttle("BlkioDeviceWriteBps"), UPDATE, sub=cf.THROTTLE_SUB),
    F("deviceWriteIops", cf.throttle("BlkioDeviceWriteIOps"), UPDATE, sub=cf.THROTTLE_SUB),
    F("platform", _platform),
    F("start", flag("start", "start"), STATE_ONLY), F("wait", flag("wait", "wait"), STATE_ONLY),
    F("waitTimeout", flag("wait_timeout", "waitTimeout", "int"), STATE_ONLY),
    F("attach", flag("attach", "attach"), STATE_ONLY), F("logs", flag("logs", "logs"), STATE_ONLY),
    F("mustRun", flag("must_run", "mustRun"), UPDATE, doc="false->true starts the container (funcs.go:997-1013)"),
    F("destroyGraceSeconds", flag("destroy_grace_seconds", "destroyGraceSeconds", "int"), STATE_ONLY),
    F("removeVolumes", flag("remove_volumes", "removeVolumes"), STATE_ONLY),
    F("containerReadRefreshTimeoutMilliseconds", None, STATE_ONLY, doc="only paces the provider's reads"),
)

CONTAINER = ResourceMapping("docker:index/container:Container", FIELDS, new_plan, autoname=True,
                            module="testbed/provider/container_map.py")

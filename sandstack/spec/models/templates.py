"""Sandbox templates: the snapshot image and everything a sandbox of that template gets."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from pydantic import StringConstraints, WithJsonSchema

from sandstack.spec.access import AS_FIELDS, AS_RESOLVED, NEVER, loosens
from sandstack.spec.changes import (DISK_WORKSPACE, IN_PLACE_AND_GUARD, NO_IDLE_TIMEOUT, NONE, NOTHING_INHERITED_CHANGES, RELOAD,
                                     REPLACE_AND_GUARD, RESEED, Effect)
from sandstack.spec.contract import SECRETS_DIR
from sandstack.spec.models.base import (
    AbsPath,
    ConfigKey,
    Duration,
    EnvName,
    ImageRef,
    Name,
    Platform,
    SecretRef,
    Size,
    StrictModel,
    field,
    text,
)
from sandstack.spec.models.limits import Lifecycle, LimitsOverride
from sandstack.spec.models.network import (NETWORK_BLOCK, NETWORK_ROLES, PORTS, PROFILES, URL_AUTH, NetworkPolicy,
                                           NetworkProfiles, Port, Urls)
from sandstack.spec.units import MIB

CAPABILITIES = (
    "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
    "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
    "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST",
    "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT",
    "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE",
    "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
)  # fmt: skip
Capability = Literal[CAPABILITIES]  # type: ignore[valid-type]

VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SnapshotVersion = text(
    VERSION_PATTERN,
    "snapshot version",
    "letters, digits, '.', '_' and '-', at most 64 characters, e.g. '2026-11-21.1'",
)
USER_PATTERN = r"^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})(:([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}))?$"
User = text(USER_PATTERN, "user", "'uid[:gid]' or 'name[:group]', e.g. '10001:10001'")
RELATIVE_PATH_PATTERN = r"^(?!/)(?!.*(^|/)\.\.(/|$))[A-Za-z0-9._@+/-]+$"
RelativePath = text(
    RELATIVE_PATH_PATTERN,
    "relative path",
    "a path relative to the stack file's folder, without '..', e.g. 'files/agent.py'",
    max_length=1024,
)
MODE_PATTERN = r"^0?[0-7]{3}$"
FileMode = text(MODE_PATTERN, "file mode", "octal, e.g. '0644'")
Command = Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], WithJsonSchema(
    {"type": "array", "items": {"type": "string", "maxLength": 4096}, "minItems": 1, "maxItems": 256}
)]


class SnapshotFile(StrictModel):
    source: RelativePath = field(description="File next to the stack file to copy into the image.", change="rebuild",
                                 access=NEVER)
    path: AbsPath = field(description="Where the file goes in the image.", change="rebuild",
                          access=NEVER)
    mode: FileMode = field("0644", description="Permissions of the copied file. Default '0644'.", change="rebuild",
                           access=NEVER)


class Snapshot(StrictModel):
    """How the template's image is built once, before any sandbox starts: base image + files + setup."""

    version: SnapshotVersion | None = field(
        None,
        description=(
            "A label a human bumps to force a rebuild even when nothing else changed. Required when there "
            "are setup steps or files. Part of the image tag."
        ),
        change="rebuild",
        access=NEVER,
    )
    setup: list[Annotated[str, StringConstraints(min_length=1, max_length=8192)]] = field(
        [],
        description=(
            "Shell commands run once at build time, as root, in order (each a `RUN /bin/sh -c`). Never run "
            "at sandbox start. Any change rebuilds the image."
        ),
        change="rebuild",
        access=NEVER, max_length=128,
    )
    files: list[SnapshotFile] = field([], description="Files copied into the image before the setup steps.",
                                      change="rebuild",
                                      access=NEVER, max_length=256)
    push_to: ImageRef | None = field(
        None,
        description="Registry repository to push the snapshot image to. Default: no push; the image is built on each host.",
        change="rebuild",
        access=NEVER,
    )
    setup_network: Literal["template", "none"] = field(
        "template",
        description=(
            "What the setup steps may reach. 'template' (default): what a new session of the template reaches, its "
            "`network` or the start profile of its `network_profiles`: the steps run on a pool network of the "
            "template on each host, through its gateway (HTTP_PROXY and HTTPS_PROXY are set for them, not kept in "
            "the image), every request logged as a session's, and a destination the policy refuses fails the step and "
            "the build (docs/design/setup-policy.md). 'none': no network at all, loopback only. Part of the build "
            "digest; the policy itself is not (a narrowed policy keeps the image: bump `version` to rebuild)."
        ),
        change="rebuild",
        access=loosens("egress", "'none' → 'template': the setup steps reach what the template's policy allows",
                       "none", "template"),
    )


# Settings that reach the container through inputs the provider shows as updates but never applies
# (its healthcheck, its tmpfs mounts): a change must replace the sandboxes (sandstack.plan.changes).
PROBE = Effect(sandboxes="replace", forces=("healthcheck",))
PROBE_AND_GUARD = Effect(sandboxes="replace", host=frozenset({"guard"}), forces=("healthcheck",),
                         when=((NO_IDLE_TIMEOUT, PROBE),))
TMPFS = Effect(sandboxes="replace", forces=("tmpfs",))
# A disk workspace is a volume named after its size, kind and seeding (sandstack.plan.workspace), so a change
# of them makes a new one (the guard makes its filesystem) and the sandboxes are replaced onto it.
NEW_WORKSPACE = Effect(sandboxes="replace", workspaces=True, host=frozenset({"guard"}), forces=("tmpfs",))
WRITABLE = Effect(sandboxes="replace", forces=("tmpfs",), when=((DISK_WORKSPACE, NEW_WORKSPACE),))
MIN_DISK_WORKSPACE = 16 * MIB  # ext4's journal and metadata leave a smaller filesystem almost nothing


class DataMount(StrictModel):
    """Files next to the stack mounted read-only into every sandbox (agent skills, reference data): updated by
    `pulumi up` without rebuilding the snapshot image, never writable by the sandbox."""

    source: RelativePath = field(description="A file or folder next to the stack file; a folder is copied whole.",
                                 change=RELOAD,
                                 access=NEVER)
    path: AbsPath = field(description="Where it appears in the sandbox, read-only, e.g. '/opt/skills'.",
                          change="replace",
                          access=NEVER)


class SecretFile(StrictModel):
    """A secret delivered as a file: owned by the sandbox user, mode 0400, on a read-only mount."""

    secret: ConfigKey = field(description="Pulumi secret config key holding the file's content.", change=RESEED,
                              access=loosens("secrets", "re-pointed to another secret", "apiToken", "apiToken2"))
    path: AbsPath = field(description=f"Path of the file inside the sandbox, under {SECRETS_DIR}/, e.g. "
                                      f"'{SECRETS_DIR}/token'.", change=RESEED,
                                      access=loosens("secrets", "moved: the secret is added at its new path",
                                                     f"{SECRETS_DIR}/api", f"{SECRETS_DIR}/api2"))


class Readiness(StrictModel):
    """A command Docker runs inside the sandbox to tell when it is ready (its health check)."""

    command: Command = field(description="Command and arguments (exec form); exit 0 means ready.", change=PROBE,
                             access=NEVER)
    interval: Duration = field("10s", description="Time between checks. Default '10s'. With an `idle_timeout` it also sets the "
                               "guard's CPU allowance for probes, so a change renews the guard.", change=PROBE_AND_GUARD,
                               access=NEVER)
    timeout: Duration = field("5s", description="Time one check may take. Default '5s'.", change=PROBE,
                              access=NEVER)
    retries: int = field(3, description="Consecutive failures before unhealthy. Default 3.", change=PROBE,
                         access=NEVER,
                         ge=1, le=100)
    start_period: Duration = field("0s", description="Grace time after start. Default '0s'.", change=PROBE,
                                   access=NEVER)


class WritablePath(StrictModel):
    path: AbsPath = field(
        description="A writable directory on the otherwise read-only root. Moving a disk workspace keeps its data.",
        change=TMPFS,
        access=NEVER)
    type: Literal["tmpfs", "disk"] = field(
        "tmpfs",
        description=(
            "'tmpfs' (default): memory, counted against `limits.memory` and `limits.disk`, emptied at every "
            "start. 'disk': a persistent workspace on the host's disk, a filesystem of exactly `size` (a write "
            "past it fails with ENOSPC) that counts against `limits.disk` only, and keeps its files across "
            "restarts and pauses; the host must declare `disk_workspaces` (docs/design/workspaces.md)."
        ),
        change=Effect(sandboxes="replace", workspaces=True, host=frozenset({"guard"}), forces=("tmpfs",)),
        access=NEVER,
    )
    size: Size = field("64MiB", description="Upper bound of what can be written there. Default 64MiB. A disk "
                       "workspace is at least 16MiB, in whole MiB; a new size makes a new, empty workspace.",
                       change=WRITABLE,
                       access=NEVER)
    seed: bool = field(
        False,
        description=(
            "Disk workspaces only: fill a new workspace with what the snapshot image has at `path` (owner and "
            "mode included), e.g. a repository cloned at build time, writable in place. Default false: empty, "
            "world-writable with the sticky bit like /tmp. A workspace that already holds data is never "
            "re-seeded, but the runtime's reset at the end of a session empties it and seeds it again; a change "
            "makes a new workspace."
        ),
        change=Effect(sandboxes="replace", workspaces=True, host=frozenset({"guard"})),
        access=NEVER,
    )
    exec: bool = field(
        False,
        description=(
            "Allow running programs from this path. Default false: mounted noexec, so a binary the sandbox "
            "writes or downloads there cannot be executed (an interpreter can still read a script from it)."
        ),
        change=WRITABLE,
        access=loosens("filesystem", "turned on: programs written there can run", False, True),
    )


class Filesystem(StrictModel):
    read_only_root: bool | None = field(
        None, description="Mount the root filesystem read-only. Default true.", change="replace",
        access=loosens("privileges", "turned off: the root filesystem writable", True, False)
    )
    writable: list[WritablePath] | None = field(
        None,
        description="Writable paths, each a size-bounded tmpfs emptied at every start or a persistent disk workspace. Default: '/tmp' of 64MiB (a quarter of a smaller memory limit).",
        change=WRITABLE,
        access=AS_FIELDS, max_length=32,
    )
    shm_size: Size | None = field(
        None,
        description=(
            "Size of /dev/shm, which every sandbox has: a tmpfs that counts against `limits.memory`, mounted "
            "nosuid, nodev and noexec, emptied at every start. In whole MiB, at least 1MiB. Default 16MiB, "
            "or an eighth of a smaller memory limit (Docker's own default is 64MiB). Programs that share memory through it, such as Chromium, may "
            "need more (or their own flag to avoid it, e.g. '--disable-dev-shm-usage')."
        ),
        change="replace",
        access=NEVER,
    )


class Security(StrictModel):
    """Loosenings of the secure defaults. Each is visible in review, and org policy decides which pass."""

    capabilities: list[Capability] | None = field(  # type: ignore[valid-type]
        None,
        description=(
            "Linux capabilities added back after dropping all of them. Default none. Docker makes them "
            "effective only for uid 0, so a template that adds any must run as user '0:0' (or privileged)."
        ),
        change="replace",
        access=loosens("privileges", "a capability added", [], ["NET_BIND_SERVICE"]),
    )
    privileged: bool | None = field(
        None, description="Run privileged (all devices, no confinement). Default false; avoid.", change="replace",
        access=loosens("privileges", "turned on", False, True)
    )
    no_new_privileges: bool | None = field(
        None, description="Forbid gaining privileges through setuid binaries. Default true.", change="replace",
        access=loosens("privileges", "turned off", True, False)
    )
    sudo: bool | None = field(
        None,
        description=(
            "Let the sandbox user run commands as root with `sudo` (passwordless), as some agent products do. "
            "An explicit loosening: the snapshot gets a passwd entry and a sudoers rule for the user, the sandbox "
            "gets `no_new_privileges` off and the capabilities root actions need (SETUID, SETGID, AUDIT_WRITE, "
            "CHOWN, DAC_OVERRIDE, FOWNER) in its bounding set; nothing else. The base image or a setup step must "
            "install sudo. Default false."
        ),
        change="rebuild",
        access=loosens("privileges", "turned on", False, True),
    )


RUNTIME = Effect(host=frozenset({"runtime"}))


class SessionPolicy(StrictModel):
    """How the host's runtime treats a sandbox of this template while a session holds it (docs/design/runtime.md).
    Applies only on hosts that declare `runtime`."""

    workspace: AbsPath | None = field(
        None, description="Root of the session's files, archives and snapshots. Default: the template's `workdir`, "
        "else its first writable path.", change=RUNTIME,
        access=NEVER)
    idle: Literal["pause", "stop", "reset", "hibernate", "never"] = field(
        "pause", description="What the runtime does to a bound sandbox idle for `idle_after` (no API call, and its "
        "CPU under the idle threshold, measured from outside): 'pause' (default; the next call resumes it), 'stop' "
        "(the session ends; the sandbox is stopped and its disk workspaces emptied at once, and the next claim "
        "starts it), 'reset' (the session ends), 'hibernate' (the container is stopped, freeing its memory and CPU, and "
        "its files kept; the session's next call resumes it: docs/design/ondemand.md; the runtime does it, so a "
        "pool of it needs a runtime on one of its hosts), or 'never'.", change=RUNTIME,
        access=NEVER)
    idle_after: Duration = field("15m", description="Idle time before `idle` applies. Default '15m'.", change=RUNTIME,
                                 access=NEVER)
    terminal_idle: Duration | None = field(
        None, description="A terminal (the runtime's WebSocket) with neither input nor output for this long is closed: "
        "its shell and everything it started end, the client gets close code 4408 with the reason, and the audit log "
        "says why. Frees the process slot an abandoned terminal holds. Default: none (open until the client or the "
        "shell ends it).", change=RUNTIME, access=NEVER)
    wakes_per_hour: int = field(
        60, description="Wakes one URL site may cause in an hour (a request to a hibernated or paused session's URL "
        "resumes it: docs/design/ondemand.md); past it the site answers as a stopped one (502) until the hour's count "
        "falls, so requests at a sandbox that hibernates again and again cannot keep the host resuming it. Default "
        "60.", change=RUNTIME, access=NEVER, ge=1, le=3600)
    snapshots: int = field(10, description="Workspace snapshots kept per pool and host (the newest). Default 10.",
                           change=RUNTIME,
                           access=NEVER, ge=1, le=1000)
    snapshot_max_age: Duration = field("7d", description="Snapshots older than this are deleted. Default '7d'.",
                                       change=RUNTIME,
                                       access=NEVER)
    upload_limit: Size = field("64MiB", description="Largest file a session may upload. Default 64MiB.",
                               change=RUNTIME, access=NEVER)
    download_limit: Size = field(
        "1GiB", description="Most a session may take out of its sandbox in one read, archive or snapshot, by apparent "
        "size (a sparse file counts at its full length): past it the runtime stops the transfer and answers 413, "
        "keeping nothing. Default 1GiB.", change=RUNTIME, access=NEVER)
    snapshot_storage: Size = field(
        "8GiB", description="Host disk all of the pool's snapshots and its hibernated sessions' copies may take on each "
        "host: a snapshot or a hibernation past it is refused (507) until snapshots are deleted. Sparse files take only "
        "their data. The pools' sum must fit the host's `capacity.disk` (rule `snapshot-storage`). Default 8GiB.",
        change=RUNTIME, access=NEVER)
    session_snapshot_storage: Size | None = field(
        None, description="One session's share of `snapshot_storage` on a host (its snapshots and its hibernation's "
        "copy): past it the session's snapshot or hibernation is refused (507), so that no session fills the pool's "
        "storage for the others. Default: `snapshot_storage` divided by the pool's sandboxes on the host (its `max`).",
        change=RUNTIME, access=NEVER)
    session_snapshots: int | None = field(
        None, description="Snapshots kept per session (the newest): a session's snapshot past it deletes that "
        "session's oldest. Default: no bound but the pool's `snapshots`.", change=RUNTIME, access=NEVER,
        ge=1, le=1000)
    session_snapshot_max_age: Duration | None = field(
        None, description="A session's snapshots older than this are deleted (a branch of one keeps its own). "
        "Default: `snapshot_max_age`.", change=RUNTIME, access=NEVER)
    exec_max_timeout: Duration = field(
        "1h", description="Longest `timeout` an exec may ask for; a longer one is refused (422). At most '1d'. "
        "Default '1h'.", change=RUNTIME,
        access=loosens("lifetime", "raised: a session's command may run longer", "1h", "2h"))
    exec_output_limit: Size = field(
        "1MiB", description="Output kept per stream (stdout, stderr) of one exec: the rest is dropped and the text "
        "ends with a truncation marker. At most 64MiB. Default 1MiB.", change=RUNTIME, access=NEVER)


# A pool moved to another template (or a template to another parent): the union of what every template setting
# renews. New sandboxes on another (or a shared) image, secrets, data and disk workspaces, and the host objects
# holding what the two set differently: the network and the guard, gateway and logging resolver (network policy,
# ports), the guard's limits and lifecycle lines, the ingress's sites (url ports), the runtime's configuration.
TEMPLATE_SWITCH = Effect(sandboxes="replace", snapshot="switch", secrets=True, data=True, workspaces=True,
                         host=NETWORK_ROLES | {"ingress", "runtime"})


class TemplateDefaults(StrictModel):
    """Settings applied to every template that does not set them itself (stack-level `defaults`)."""

    limits: Name | LimitsOverride | None = field(
        None, description="Limits: a profile name, or fields with an optional `profile`.", change=REPLACE_AND_GUARD,
        access=AS_RESOLVED
    )
    network: NetworkPolicy | None = field(
        None, description="Network policy; a template's own `network` replaces it whole.", change=NETWORK_BLOCK,
        access=AS_FIELDS
    )
    runtime: Literal["runc", "runsc"] | None = field(
        None, description="Isolation runtime: 'runc' (default) or 'runsc' (gVisor, must be installed on the host).",
        change="replace",
        access=loosens("privileges", "to 'runc' (no gVisor kernel between the sandbox and the host)",
                       "runsc", "runc"),
    )
    lifecycle: Lifecycle | None = field(None, description="Lifetime limits, merged field by field.",
                                        change=IN_PLACE_AND_GUARD,
                                        access=AS_FIELDS)
    filesystem: Filesystem | None = field(None, description="Root and writable paths, merged field by field.",
                                          change=WRITABLE,
                                          access=AS_FIELDS)
    security: Security | None = field(None, description="Loosenings, merged field by field.", change="replace",
                                      access=AS_FIELDS)
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=32768)] | SecretRef] = field(
        {}, description="Environment merged under each template's own `env`. A variable whose name says it holds a "
                        "secret (`*PASSWORD*`, `*SECRET*`, `*_TOKEN`, `*_KEY`, `*_APIKEY`, `*_PAT`, `*_CREDENTIALS`, "
                        "`*_AUTH`…, also with a part marker such as `_A` or `_2`; not `*_FILE`, `*_PATH`, `*_ID`, "
                        "`*_NAME`… nor `PUBLIC_*`) is never printed by any command, and `check` wants it as "
                        "`{secret: KEY}` (SBX-SEC-005). A value may refer to the sandbox's own public host name and "
                        "URLs, `${SANDSTACK_PUBLIC_HOSTNAME}` and `${SANDSTACK_URL_<NAME>}`, rendered per sandbox "
                        "(`$${…}` for the literal text; docs/design/ingress.md).", change="replace",
        access=loosens("secrets", "a secret added to the environment", {}, {"TOKEN": {"secret": "apiToken"}})
    )
    user: User | None = field(
        None, description="User the sandbox runs as. Default '10001:10001'. Secret files are re-seeded for it.",
        change=Effect(sandboxes="replace", secrets=True),
        access=loosens("privileges", "to root (uid 0)", "10001:10001", "0:0"),
    )
    workdir: AbsPath | None = field(None, description="Working directory. Default: the image's.", change="replace",
                                    access=NEVER)
    base_image: ImageRef | None = field(
        None, description="Image the snapshot starts from; pin with '@sha256:…' for reproducible builds. A template "
                          "without one takes its `extends`' or the defaults'.", change="rebuild",
                          access=NEVER)
    platform: Platform | None = field(  # type: ignore[valid-type]
        None, description="The OS and architecture the snapshot image is built for and the sandboxes run as: "
        "'linux/amd64' or 'linux/arm64' (the builds' and containers' `platform`). Every host of a pool of the template "
        "must offer it in its `platforms`, natively or under emulation (rule `platform`; docs/design/platforms.md). "
        "Default: none, each host's own architecture (the base image's variant for it), as before this field.",
        change="rebuild", access=NEVER)
    snapshot: Snapshot | None = field(
        None, description="Build steps baked into the snapshot image; a template's own replaces the inherited one "
                          "whole.", change="rebuild",
                          access=NEVER)
    session: SessionPolicy | None = field(
        None, description="The runtime's session policy; a template's own replaces the inherited one whole.",
        change=RUNTIME,
        access=NEVER)
    urls: Urls | None = field(
        None, description="Who may open the sandbox's URLs (its `exposure: url` ports); a template's own replaces the "
                          "inherited one whole.", change=URL_AUTH, access=AS_FIELDS)


class Template(TemplateDefaults):
    """A kind of sandbox: its snapshot image, resources, network policy, ports and runtime settings."""

    description: Annotated[str, StringConstraints(max_length=500)] = field("", description="What it is for.",
                                                                          change="none",
                                                                          access=NEVER)
    extends: Name | None = field(
        None,
        description=(
            "Another template this one starts from: every setting it does not set itself comes from there "
            "(`lifecycle`, `filesystem`, `security` and `env` merged field by field, the rest whole), then from "
            "`defaults`. Templates with the same snapshot content build one image per host."
        ),
        # Whatever the inherited settings do, as a pool's template switch.
        change=dataclasses.replace(TEMPLATE_SWITCH, when=((NOTHING_INHERITED_CHANGES, NONE),)),
        access=AS_RESOLVED,
    )
    data: list[DataMount] = field(
        [], description="Read-only data mounted from files next to the stack (at most 64MiB in all per template).",
        change=Effect(sandboxes="replace", data=True),
        access=NEVER, max_length=16)
    secrets: list[SecretFile] = field([], description="Secrets delivered as files.", change=RESEED,
                                      access=loosens("secrets", "a secret file added",
                                                     [], [{"secret": "apiToken", "path": f"{SECRETS_DIR}/api"}]),
                                      max_length=64)
    entrypoint: Command | None = field(None, description="Entrypoint override (exec form).", change="replace",
                                       access=NEVER)
    command: Command | None = field(None, description="Command (exec form). Default: the image's.", change="replace",
                                    access=NEVER)
    readiness: Readiness | None = field(None, description="Readiness probe. Default: none.", change=PROBE_AND_GUARD,
                                        access=NEVER)
    network_profiles: NetworkProfiles | None = field(
        None, description="Named network policies a session switches between at run time, and the one it starts "
        "in; instead of `network` (a template sets one or the other; the defaults' `network` does not reach a "
        "template with profiles). docs/design/network-profiles.md.", change=PROFILES, access=AS_FIELDS)
    ports: list[Port] = field([], description="Ports the sandbox listens on, and their exposure.",
                              change=PORTS,
                              access=loosens("ports", "a port added with an exposure",
                                             [], [{"port": 8000, "exposure": "host"}]),
                              max_length=64)

"""The build context of a snapshot image: a generated Dockerfile, the template's files and the supervisor.

The image tag carries the snapshot version and a digest of everything that goes into the build
(base image, files and their modes, setup steps, the supervisor, this file's format), so a changed
setup always rebuilds and a bumped version rebuilds even when nothing else changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from sandstack.plan.naming import labels
from sandstack.plan.network import NO_PROXY, PoolNetwork
from sandstack.plan.package_files import SETUP_STEP_SOURCE, SUPERVISOR_SOURCE
from sandstack.plan.squid import REFUSALS_HOST, REFUSALS_PREFIX
from sandstack.spec.resolve import ResolvedTemplate

SUPERVISOR_PATH = "/usr/local/lib/sandstack/supervise"
# Each setup step runs under it (components/assets/setup_step.sh): its lookups to the pool's logging resolver, and
# on failure what the pool's gateway refused it.
SETUP_STEP_PATH = "/usr/local/lib/sandstack/setup-step"
SETUP_STEP = SETUP_STEP_SOURCE.read_text().replace("@REFUSALS_HOST@", REFUSALS_HOST) \
    .replace("@REFUSALS_PREFIX@", REFUSALS_PREFIX)
# A build argument for the wrapper: the pool's network has the host's logging resolver, on its bridge.
RESOLVER_ARG = "SANDSTACK_SETUP_RESOLVER"
RESOLVER_ON_BRIDGE = "bridge"
PROXY_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY_ARGS = ("NO_PROXY", "no_proxy")
# Bump when the generated Dockerfile changes shape, so every snapshot is rebuilt with it.
FORMAT = 1


@dataclass(frozen=True)
class BuildPlan:
    context: Path
    dockerfile: str
    digest: str  # sha256 hex of the build inputs
    tag: str  # '<version>-<digest12>' or '<digest12>'


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_inputs(template: ResolvedTemplate) -> dict[str, object]:
    """Everything that determines the image, in a canonical form (what the digest covers)."""
    return {
        "format": FORMAT,
        "base_image": template.base_image,
        "version": template.snapshot_version,
        "setup": list(template.setup),
        "files": [
            {"path": f.path, "mode": f.mode, "sha256": _sha256(f.source.read_bytes())} for f in template.files
        ],
        "supervisor": _sha256(SUPERVISOR_SOURCE.read_bytes()),
        **({"sudo": template.user} if template.sudo else {}),
        # Only where declared: a template without one keeps the digest (and image) it had before the field.
        **({"platform": template.platform} if template.platform else {}),
        # Only with setup steps, the only part of a build that may reach a network: an image whose steps ran on the
        # daemon's network (before this) or in the other mode is rebuilt; one without steps keeps its digest. The
        # policy itself is not covered (docs/design/setup-policy.md).
        **({"setup_network": template.setup_network} if template.setup else {}),
        # The steps' wrapper, with setup steps only: a changed wrapper rebuilds them under it.
        **({"setup_step": _sha256(SETUP_STEP.encode())} if template.setup else {}),
    }


def setup_key(template: ResolvedTemplate) -> str | None:
    """What the setup steps were allowed to reach, canonical: templates of one content share an image only when this
    is the same too, so an image is never reused by a template whose setup may reach less. None: no steps, or none
    of them reach a network."""
    policy = template.setup_policy if template.setup else None
    return None if policy is None else json.dumps(dataclasses.asdict(policy), sort_keys=True, default=str)


def setup_build(template: ResolvedTemplate, network: PoolNetwork) -> dict[str, object]:
    """The build's inputs that put its setup steps under the template's setup policy (docs/design/setup-policy.md):
    on `network`, a pool network of the template on the host (the guard's rules and the gateway's section for the
    pool judge the steps as a new session of it), with the pool's proxy for HTTP(S); 'none': no network. Empty
    without setup steps (nothing of the build reaches a network), so such an image's inputs are as before."""
    if not template.setup:
        return {}
    # A refused step fails the build: its stopped container goes too (the classic builder keeps it otherwise).
    if template.setup_policy is None:
        return {"network_mode": "none", "force_remove": True}
    proxy = network.proxy_url
    # Docker's predefined proxy arguments: the RUN steps see them, the image's history and config do not keep them.
    args = {**{name: proxy for name in PROXY_ARGS}, **dict.fromkeys(NO_PROXY_ARGS, NO_PROXY)} if proxy else {}
    # The pool has the host's logging resolver, where a session's lookups go (deny-all and unlogged routes have none:
    # the steps resolve as their sessions do): the wrapper finds it on the pool's bridge. No address in the arguments:
    # a moved subnet (a changed `subnet_pool`) rebuilds nothing. The image's history shows it on each setup step.
    if network.resolver:
        args[RESOLVER_ARG] = RESOLVER_ON_BRIDGE
    return {"network_mode": network.name, "force_remove": True, **({"build_args": args} if args else {})}


@dataclass(frozen=True)
class SnapshotPlan:
    digest: str  # sha256 hex of the build inputs
    tag: str  # '<version>-<digest12>' or '<digest12>'
    image: str  # repository:tag
    repository: str  # the declared `push_to`, else `sandstack-<stack>/<template>` on the host


# While a stack is planned (`digests_once`): template (by identity, kept alive with it) → its build digest. Each
# placement of a template asks for its snapshot, 3 times over: its files were read and hashed 3,000 times for a
# 1,000-sandbox stack (a quarter of its plan's time). Scoped to one plan: files may change between plans.
_DIGESTS: ContextVar[dict[int, tuple[ResolvedTemplate, str]] | None] = ContextVar("sandstack_digests", default=None)


@contextmanager
def digests_once() -> Iterator[None]:
    """Within it, each template's build inputs are read and hashed once."""
    token = _DIGESTS.set({})
    try:
        yield
    finally:
        _DIGESTS.reset(token)


def _digest(template: ResolvedTemplate) -> str:
    known = _DIGESTS.get()
    hit = None if known is None else known.get(id(template))
    if hit is not None and hit[0] is template:
        return hit[1]
    digest = _sha256(json.dumps(build_inputs(template), sort_keys=True).encode())
    if known is not None:
        known[id(template)] = (template, digest)
    return digest


def plan_snapshot(template: ResolvedTemplate, stack: str) -> SnapshotPlan:
    """The snapshot image's name and digest, without writing the build context."""
    digest = _digest(template)
    tag = f"{template.snapshot_version}-{digest[:12]}" if template.snapshot_version else digest[:12]
    repository = template.push_to or f"sandstack-{stack}/{template.name}"
    return SnapshotPlan(digest, tag, f"{repository}:{tag}", repository)


def image_labels(template: ResolvedTemplate, stack: str, host_labels: Mapping[str, str], digest: str) -> dict[str, str]:
    """The snapshot image's labels: which stack, template, version and build inputs it was made from."""
    return labels(stack, host_labels, template=template.name, version=template.snapshot_version or "", digest=digest)


def dockerfile_text(template: ResolvedTemplate, digest: str) -> str:
    lines = [
        f"# Generated by sandstack for template '{template.name}' (digest {digest[:12]}); do not edit.",
        f"FROM {template.base_image}",
        # Setup runs as root whatever USER the base image sets; the sandbox's user is set at run time.
        "USER root",
        f"COPY supervise {SUPERVISOR_PATH}",
    ]
    # COPY keeps each file's mode from the context, which works on the legacy builder and BuildKit
    # alike (COPY --chmod needs BuildKit).
    lines += [f"COPY files/{i} {f.path}" for i, f in enumerate(template.files)]
    if template.setup:
        lines += [f"COPY setup-step {SETUP_STEP_PATH}", f"ARG {RESOLVER_ARG}"]
    lines += [f"RUN {json.dumps(['/bin/sh', SETUP_STEP_PATH, template.name, str(i), step])}"
              for i, step in enumerate(template.setup)]
    if template.sudo:
        lines.append(f"RUN {json.dumps(['/bin/sh', '-c', sudo_step(template.user)])}")
    return "\n".join(lines) + "\n"


def sudo_step(user: str) -> str:
    """After the setup (which installs sudo where the base image lacks it): a passwd, shadow and group entry for
    the sandbox's numeric user, named `sandbox` unless the image names it, and a passwordless sudoers rule for
    it. sudo refuses a user the passwd file does not know, and refuses to run at all without a sudoers file
    it can read."""
    uid, _, gid = user.partition(":")
    gid = gid or uid
    return (
        "command -v sudo >/dev/null || { echo 'security.sudo: the image has no sudo; install it in a setup step' >&2;"
        " exit 1; }"
        f" && {{ grep -q '^[^:]*:[^:]*:{gid}:' /etc/group || echo 'sandbox:x:{gid}:' >> /etc/group; }}"
        f" && {{ grep -q '^[^:]*:[^:]*:{uid}:' /etc/passwd || echo 'sandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/sh'"
        " >> /etc/passwd"
        # PAM's account check wants a shadow entry: '*' (no password login), never expiring.
        " && { [ ! -f /etc/shadow ] || grep -q '^sandbox:' /etc/shadow || echo 'sandbox:*:19000:0:99999:7:::'"
        " >> /etc/shadow; }; }"
        f" && mkdir -p /etc/sudoers.d && echo '#{uid} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/sandstack"
        " && chmod 0440 /etc/sudoers.d/sandstack"
    )


def build_context(build_root: Path, template: ResolvedTemplate, digest: str) -> Path:
    """Where `prepare_build` writes a snapshot's build context."""
    return build_root / f"{template.name}-{digest[:12]}"


def prepare_build(template: ResolvedTemplate, build_root: Path) -> BuildPlan:
    """Write the build context under `build_root/<template>-<digest12>` (idempotent) and describe it."""
    snapshot = plan_snapshot(template, "")
    digest, tag = snapshot.digest, snapshot.tag
    context = build_context(build_root, template, digest)
    dockerfile = dockerfile_text(template, digest)
    if not (context / "Dockerfile").exists() or (context / "Dockerfile").read_text() != dockerfile:
        staging = context.with_name(context.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "files").mkdir(parents=True)
        shutil.copyfile(SUPERVISOR_SOURCE, staging / "supervise")
        os.chmod(staging / "supervise", 0o755)
        if template.setup:
            (staging / "setup-step").write_text(SETUP_STEP)
            os.chmod(staging / "setup-step", 0o755)
        for i, item in enumerate(template.files):
            target = staging / "files" / str(i)
            shutil.copyfile(item.source, target)
            os.chmod(target, int(item.mode, 8))
        (staging / "Dockerfile").write_text(dockerfile)
        shutil.rmtree(context, ignore_errors=True)
        staging.rename(context)
    return BuildPlan(context=context, dockerfile=dockerfile, digest=digest, tag=tag)

"""A pool's secret files: one named volume per pool and host, filled by a run-once seeder and mounted read-only at
`/run/secrets` in every sandbox of the pool. Secret values never pass through the plan: an upload names its config
key, and the component resolves it."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.contract import SECRETS_DIR, SESSION_SECRETS_DIR
from sandstack.plan.data import SEED_DIR, STAGING_DIR
from sandstack.plan.naming import docker_name
from sandstack.spec.resolve import ResolvedTemplate

# Readable by the sandbox's user alone; the read-only mount keeps even that user from changing or chmod-ing them.
MODE = "0400"
# The seeder hands each file to the sandbox's user, and needs nothing else.
CAPABILITIES = ("CHOWN",)
ROLE = "secrets-seeder"


@dataclass(frozen=True)
class SecretUpload:
    path: str  # where the provider uploads the value into the seeder
    secret: str  # the config key of the value (`SecretRef.secret`)


@dataclass(frozen=True)
class SecretsPlan:
    volume: str  # Docker volume name
    seeder_name: str
    owner: str  # 'uid:gid' of the sandbox's user
    uploads: tuple[SecretUpload, ...]
    script: str
    seed_dir: str = SEED_DIR  # where the seeder sees the volume
    path: str = SECRETS_DIR  # where sandboxes see it, read-only
    mode: str = MODE
    capability_adds: tuple[str, ...] = CAPABILITIES
    role: str = ROLE


def owner_of(user: str) -> str:
    """`1000` → `1000:1000`: the group is the user's own unless the template names one."""
    uid, _, gid = user.partition(":")
    return f"{uid}:{gid or uid}"


def session_secrets_mode(user: str) -> str:
    """The mode of the session secrets' directory (the tmpfs of sandstack.plan.sandbox `session_secrets_tmpfs`): the
    sandbox user's alone where the user is numeric (the tmpfs is made its), else sticky and world-writable."""
    return "0700" if user.partition(":")[0].isdigit() else "1777"


def plan_secrets(stack: str, pool: str, template: ResolvedTemplate) -> SecretsPlan | None:
    if not template.secrets:
        return None
    owner = owner_of(template.user)
    # A re-seed starts from an empty volume: a secret the spec removed or moved must not stay readable.
    # The session secrets' tmpfs is mounted inside the read-only volume: its mount point must be in it already,
    # and a re-seed keeps it (removing a directory that is a mount point elsewhere detaches that mount in the
    # running sandboxes).
    # Docker's runtime gives the tmpfs the mode of its mount point, whatever its own `mode=` says (measured on 20.10:
    # the sandbox's /run/secrets/session was 0755 under mode=0700): the mount point has the tmpfs's mode.
    session = f"{SEED_DIR}/{SESSION_SECRETS_DIR.removeprefix(SECRETS_DIR + '/')}"
    script = ["set -e", f"find {SEED_DIR} -mindepth 1 ! -path {session} -delete",
              f"mkdir -p {session} && chmod {session_secrets_mode(template.user)} {session}"]
    uploads = []
    for i, s in enumerate(template.secrets):
        relative = s.path.removeprefix(SECRETS_DIR + "/")
        staged, seeded = f"{STAGING_DIR}/{i}", f"{SEED_DIR}/{relative}"
        uploads.append(SecretUpload(staged, s.secret))
        script.append(
            f'mkdir -p "$(dirname {seeded})" && rm -f {seeded} && '
            f"cp {staged} {seeded} && chmod {MODE} {seeded} && chown {owner} {seeded}"
        )
    script.append(f"rm -f {STAGING_DIR}/*")
    return SecretsPlan(docker_name(stack, pool, "secrets"), docker_name(stack, pool, "secrets-seeder"), owner,
                       tuple(uploads), "\n".join(script))

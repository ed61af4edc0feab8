"""A pool's read-only data mounts: one named volume per mount, filled by a run-once seeder from files next to
the stack, mounted read-only into every sandbox. A changed file changes only the seeder's uploads, so `pulumi
up` reloads the volumes without rebuilding the snapshot or replacing a sandbox."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

from sandstack.plan.naming import docker_name
from sandstack.spec.resolve import ResolvedTemplate

SEED_DIR = "/seed"  # where the seeder sees the volumes
STAGING_DIR = "/staging"  # where the provider uploads the files into the seeder


@dataclass(frozen=True)
class DataVolume:
    name: str  # Docker volume name
    path: str  # where sandboxes see it, read-only


@dataclass(frozen=True)
class DataPlan:
    volumes: tuple[DataVolume, ...]
    uploads: tuple[tuple[str, Path], ...]  # (path in the seeder, file next to the stack)
    script: str
    files: dict[str, str]  # "<mount path>/<relative path>" → sha256, what a reviewer reads
    seeder_name: str


def plan_data(stack: str, pool: str, template: ResolvedTemplate) -> DataPlan | None:
    if not template.data:
        return None
    volumes, uploads, files = [], [], {}
    script = ["set -e"]
    for i, mount in enumerate(template.data):
        volumes.append(DataVolume(docker_name(stack, pool, f"data{i}"), mount.path))
        seed = f"{SEED_DIR}/{i}"
        # A reload starts from an empty volume: a file removed next to the stack disappears in the sandboxes.
        # The last load left it read-only, and the loader (root without DAC_OVERRIDE) owns it: open it first.
        script.append(f"chmod -R u+w {seed} && find {seed} -mindepth 1 -delete")
        for relative, source in mount.files:
            uploads.append((f"{STAGING_DIR}/{i}/{relative}", source))
            files[f"{mount.path}/{relative}"] = hashlib.sha256(source.read_bytes()).hexdigest()
        script.append(f"if [ -d {STAGING_DIR}/{i} ]; then cp -R {STAGING_DIR}/{i}/. {seed}/; fi")
        # Readable by any sandbox user, writable by none (the mount is read-only too).
        script.append(f"chmod -R a=rX {shlex.quote(seed)}")
    script.append(f"rm -rf {STAGING_DIR}/*")
    return DataPlan(tuple(volumes), tuple(uploads), "\n".join(script), files,
                    docker_name(stack, pool, "data-seeder"))

"""What the snapshot image and the data mounts are built from: a base image, a version with setup, files inside the stack's folder, data within its limits."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.contract import SECRETS_DIR
from sandstack.spec.errors import Diagnostic
from sandstack.spec.rules.context import Context, rule, templates
from sandstack.spec.units import MIB


@rule("base-image")
def base_image_set(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        if template.base_image is None:
            yield ctx.error(path, f"template {path[-1]!r} has no `base_image`: set it, or inherit one from the "
                            "template it `extends` or from `defaults`", "base-image")


@rule("snapshot-version")
def snapshot_version_with_setup(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        snap = template.snapshot
        if (snap.setup or snap.files) and snap.version is None:
            yield ctx.error(path + ("snapshot",), "`snapshot.version` is required when there are setup steps or "
                            "files: bump it to force a rebuild, e.g. version: '1'", "snapshot-version")


@rule("setup-network")
def setup_network_with_setup(ctx: Context) -> Iterator[Diagnostic]:
    """`snapshot.setup_network` says what the setup steps reach: declared without steps it says nothing, and a reader
    would take it for a policy of the image (docs/design/setup-policy.md)."""
    defaults = ctx.stack.defaults.snapshot
    # Each snapshot where it is written: a template that takes its `extends`' or the defaults' whole is reported there.
    owners = [(("defaults",), "`defaults.snapshot`", defaults)] if defaults is not None else []
    for path, template in templates(ctx):
        parent = ctx.stack.templates.get(template.extends) if template.extends else None
        if template.snapshot is not defaults and (parent is None or template.snapshot is not parent.snapshot):
            owners.append((path, f"template {path[-1]!r}", template.snapshot))
    for path, who, snap in owners:
        if "setup_network" in snap.model_fields_set and not snap.setup:
            yield ctx.error(path + ("snapshot", "setup_network"),
                            f"{who} sets `snapshot.setup_network: {snap.setup_network}` but has no setup steps: it "
                            "applies to nothing (only setup steps reach a network during a build); remove it, or add "
                            "the steps to `snapshot.setup`", "setup-network")


@rule("snapshot-file")
def snapshot_files_exist(ctx: Context) -> Iterator[Diagnostic]:
    base = ctx.source.parent.resolve()
    for path, template in templates(ctx):
        for i, item in enumerate(template.snapshot.files):
            where = path + ("snapshot", "files", i, "source")
            target = (base / item.source).resolve()
            if base not in target.parents:
                yield ctx.error(where, f"{item.source!r} resolves outside the stack file's folder {str(base)!r}",
                                "snapshot-file")
            elif not target.is_file():
                yield ctx.error(where, f"{item.source!r} is not a file (looked in {str(base)!r})", "snapshot-file")


DATA_MAX_BYTES = 64 * MIB  # per template: data is uploaded through the provider's state, not a registry


DATA_MAX_FILES = 1000


@rule("data-source")
def data_sources(ctx: Context) -> Iterator[Diagnostic]:
    base = ctx.source.parent.resolve()
    for path, template in templates(ctx):
        total, count, seen = 0, 0, set()
        for i, item in enumerate(template.data):
            where = path + ("data", i)
            target = (base / item.source).resolve()
            if base not in target.parents:
                yield ctx.error(where + ("source",), f"{item.source!r} resolves outside the stack file's folder "
                                f"{str(base)!r}", "data-source")
                continue
            if not target.exists():
                yield ctx.error(where + ("source",), f"{item.source!r} is neither a file nor a folder (looked in "
                                f"{str(base)!r})", "data-source")
                continue
            files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()]
            total += sum(p.stat().st_size for p in files)
            count += len(files)
            if item.path in seen or item.path == "/" or item.path == SECRETS_DIR or \
                    item.path.startswith(SECRETS_DIR + "/"):
                yield ctx.error(where + ("path",), f"{item.path!r} is taken (another data mount, the root or the "
                                "secrets folder): mount data at a path of its own, e.g. '/opt/skills'", "data-source")
            seen.add(item.path)
        if total > DATA_MAX_BYTES or count > DATA_MAX_FILES:
            yield ctx.error(path + ("data",), f"data mounts hold {count} files of {total} bytes; at most "
                            f"{DATA_MAX_FILES} files and {DATA_MAX_BYTES // MIB}MiB per template (use a volume "
                            "or the snapshot image for more)", "data-source")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (base_image_set, snapshot_version_with_setup, setup_network_with_setup, snapshot_files_exist, data_sources,)

"""Who a sandbox runs as: secret files under the secrets mount for a numeric user, capabilities that can take effect, sudo for a non-root user."""

from __future__ import annotations

import re
from typing import Iterator

from sandstack.spec.contract import SECRETS_DIR, SESSION_SECRETS_DIR
from sandstack.spec.errors import Diagnostic
from sandstack.spec.resolve import effective_user, inherited
from sandstack.spec.rules.context import Context, rule, templates


NUMERIC_USER = re.compile(r"^[0-9]+(:[0-9]+)?$")


@rule("secret-path")
def secrets_under_secrets_mount(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        for i, s in enumerate(template.secrets):
            if not s.path.startswith(SECRETS_DIR + "/"):
                yield ctx.error(path + ("secrets", i, "path"), f"{s.path!r} must be under {SECRETS_DIR}/: secret "
                                f"files are delivered on a read-only mount there, e.g. '{SECRETS_DIR}/token'",
                                "secret-path")
            elif s.path == SESSION_SECRETS_DIR or s.path.startswith(SESSION_SECRETS_DIR + "/"):
                yield ctx.error(path + ("secrets", i, "path"), f"{s.path!r} is under {SESSION_SECRETS_DIR}/, where "
                                "the runtime puts a session's own secret files: choose another path under "
                                f"{SECRETS_DIR}/, e.g. '{SECRETS_DIR}/token'", "secret-path")


@rule("secret-user")
def secrets_need_numeric_user(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        user = effective_user(ctx.stack, template)
        if template.secrets and not NUMERIC_USER.match(user):
            where = path + ("user",) if template.user else ("defaults", "user")
            yield ctx.error(where, f"user {user!r} must be numeric ('uid' or 'uid:gid') in a template with "
                            "secrets: the files are owned by that uid before the image's user names are known",
                            "secret-user")


@rule("capabilities-user")
def capabilities_need_root(ctx: Context) -> Iterator[Diagnostic]:
    """Docker gives a non-root process added capabilities only in its bounding set, never effective
    (moby#50083; measured on 20.10: `--user 2345 --cap-add CHOWN` leaves CapEff 0), so they cannot be
    enforced unless the sandbox runs as uid 0 (still read-only, no-new-privileges, only those caps)."""
    for path, template in templates(ctx):
        sec = template.security
        caps = inherited(ctx.stack, template, "security", "capabilities")
        privileged = inherited(ctx.stack, template, "security", "privileged")
        user = effective_user(ctx.stack, template)
        sudo = inherited(ctx.stack, template, "security", "sudo")
        if caps and not privileged and not sudo and user.partition(":")[0] not in ("0", "root"):
            where = path + ("security", "capabilities") if sec and sec.capabilities is not None else (
                "defaults", "security", "capabilities")
            yield ctx.error(where, f"{list(caps)} cannot take effect for user {user!r}: Docker gives a non-root "
                            "user added capabilities only in its bounding set, never effective; run the template "
                            "as user '0:0' (it keeps only these capabilities, a read-only root and "
                            "no-new-privileges) or remove them", "capabilities-user")


@rule("sudo")
def sudo_for_a_non_root_user(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        if not inherited(ctx.stack, template, "security", "sudo"):
            continue
        user = effective_user(ctx.stack, template)
        if user.partition(":")[0] in ("0", "root"):
            yield ctx.error(path + ("user",), f"`security.sudo` is for a non-root user, not {user!r}: root needs "
                            "no sudo; set a user such as '10001:10001' or drop sudo", "sudo")
        elif not user.partition(":")[0].isdigit():
            yield ctx.error(path + ("user",), f"`security.sudo` needs a numeric user ('uid:gid'), not {user!r}: "
                            "the snapshot adds its passwd entry", "sudo")
        if inherited(ctx.stack, template, "security", "no_new_privileges") is True and (
                (template.security and template.security.no_new_privileges is True)
                or (ctx.stack.defaults.security and ctx.stack.defaults.security.no_new_privileges is True)):
            yield ctx.error(path + ("security", "no_new_privileges"), "`security.sudo` needs setuid, which "
                            "`no_new_privileges: true` forbids: remove one of them", "sudo")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (secrets_under_secrets_mount, secrets_need_numeric_user, capabilities_need_root, sudo_for_a_non_root_user,)

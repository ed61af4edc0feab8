"""Semantic rules: each case changes `fixtures/rules.yaml` and asserts the exact message, rule id and place."""

from __future__ import annotations

import re

import pytest

from sandstack.spec.rules import RULES
from tests.spec.helpers import edit, fixture_text, lines

BASE = fixture_text("rules.yaml")
# Below 128MiB the built-in /dev/shm is an eighth of the memory limit (here 96 or 100MiB: 12MiB).
FULL_TMPFS = ("writable paths and /dev/shm can hold 76MiB (/tmp 64MiB, /dev/shm 12MiB), leaving less than 32MiB "
              "of `limits.memory` {}MiB for processes: tmpfs files are memory, so full paths would get the sandbox's "
              "next process OOM-killed; shrink the paths or `filesystem.shm_size`, or raise `limits.memory` to at "
              "least {}MiB")
DIRECT_DENY = ("a domain deny needs the gateway to see names; with `log: false` or `protocols: any` the sandbox connects "
               "directly, so only addresses and CIDRs can be denied, optionally with a port (e.g. '203.0.113.7', "
               "'10.0.0.0/8:443'); or send egress through the gateway (`log: true` with `protocols: http`)")
FIXED_PORT = "one sandbox per host can own a fixed port (drop `host_port` to let Docker pick)"


def change(*pairs: str) -> str:
    """The base fixture with each (old, new) pair replaced; most cases change a single field."""
    text = BASE
    for old, new in zip(pairs[::2], pairs[1::2]):
        text = edit(text, old, new)
    return text


NETWORK = "    network:\n      egress: allow-list\n      allow:\n        - api.example.com\n"
PROFILES = ("    network_profiles:\n      start: open\n      profiles:\n        open:\n          egress: allow-list\n"
            "          allow: [api.example.com]\n        locked:\n          egress: deny-all\n")
RUNTIME = ("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n")


def profiled(*pairs: str, runtime: bool = True) -> str:
    """The base with template `web`'s network as profiles `open` (start) and `locked`, and a runtime on its host."""
    text = change(NETWORK, PROFILES, *(RUNTIME if runtime else ()))
    for old, new in zip(pairs[::2], pairs[1::2]):
        text = edit(text, old, new)
    return text


# rule id → [(case id, stack text, exact lines)]; every rule in RULES must have at least one case.
RULE_CASES: dict[str, list[tuple[str, str, list[str]]]] = {
    "ref-template": [
        ("unknown-template", change("    template: web\n", "    template: wbe\n"),
         ["stack.yaml:45:15: $.pools.web.template: template 'wbe' is not defined; templates: web"]),
    ],
    "ref-host": [
        ("unknown-host", change("      - local\n", "      - lcoal\n"),
         ["stack.yaml:47:9: $.pools.web.hosts[0]: host 'lcoal' is not defined; hosts: local"]),
        ("host-listed-twice", change("      - local\n", "      - local\n      - local\n"),
         ["stack.yaml:48:9: $.pools.web.hosts[1]: host 'local' is listed twice"]),
    ],
    "ref-profile": [
        ("unknown-profile-in-override", change("      profile: small\n", "      profile: smal\n"),
         ["stack.yaml:26:16: $.templates.web.limits.profile: profile 'smal' is not defined; profiles: small"]),
        ("unknown-profile-in-defaults", change("  limits: small\n", "  limits: tiny\n"),
         ["stack.yaml:16:11: $.defaults.limits: profile 'tiny' is not defined; profiles: small"]),
    ],
    "host-endpoint": [
        ("tcp-without-tls", change("unix:///var/run/docker.sock", "tcp://docker.example.com:2376"),
         ["stack.yaml:5:15: $.hosts.local.endpoint: 'tcp://docker.example.com:2376' needs `tls` (ca, cert, key): "
          "a Docker daemon on plain tcp is open to anyone who can reach it"]),
        ("tls-on-unix", change("    capacity:\n", "    tls: {ca: {secret: ca}, cert: {secret: crt}, key: {secret: k}}\n"
                                                  "    capacity:\n"),
         ["stack.yaml:6:5: $.hosts.local.tls: `tls` applies only to tcp:// endpoints, not unix://"]),
        ("ssh-opts-on-unix", change("    capacity:\n", "    ssh_opts: [-v]\n    capacity:\n"),
         ["stack.yaml:6:5: $.hosts.local.ssh_opts: `ssh_opts` applies only to ssh:// endpoints, not unix://"]),
    ],
    "egress-entry": [
        ("tld-wildcard", change("        - api.example.com\n", "        - '*.com'\n"),
         ["stack.yaml:31:11: $.templates.web.network.allow[0]: '*.com' covers a whole top-level domain; name a "
          "registrable domain, e.g. '*.example.com'"]),
    ],
    "network-profiles": [
        ("network-and-profiles", profiled("    network_profiles:\n", "    network: {egress: deny-all}\n"
                                          "    network_profiles:\n"),
         ["stack.yaml:31:5: $.templates.web.network_profiles: a template sets `network` or `network_profiles`, not "
          "both: the start profile (`network_profiles.start`) is the policy a session starts in; move `network` into "
          "`network_profiles.profiles`"]),
        ("start-undeclared", profiled("      start: open\n", "      start: opn\n"),
         ["stack.yaml:31:14: $.templates.web.network_profiles.start: 'opn' is not a profile of this template; its "
          "profiles: locked, open"]),
        ("direct-profile", profiled("          egress: deny-all\n", "          egress: allow-all\n          log: false\n"),
         ["stack.yaml:38:16: $.templates.web.network_profiles.profiles.locked.log: profile 'locked' has a direct "
          "route out (`log: false`), which puts its sandboxes on a routed network of their own; a switch must never "
          "move a sandbox to another network, so every profile goes through the gateway ('deny-all', 'allow-list', "
          "or logged 'allow-all' with `protocols: http`)"]),
        ("all-deny-all", profiled("          egress: allow-list\n          allow: [api.example.com]\n",
                                  "          egress: deny-all\n"),
         ["stack.yaml:33:9: $.templates.web.network_profiles.profiles: every profile is 'deny-all': a switch would "
          "change nothing; give one egress ('allow-list' or 'allow-all'), or use `network: {egress: deny-all}`"]),
        ("metadata-differs", profiled("          allow: [api.example.com]\n",
                                      "          allow: [api.example.com]\n          allow_metadata: true\n",
                                      "          egress: deny-all\n", "          egress: allow-list\n"
                                      "          allow: [api.example.com]\n"),
         ["stack.yaml:38:11: $.templates.web.network_profiles.profiles.locked.allow_metadata: profile 'locked' sets "
          "`allow_metadata: false` and profile 'open' `true`: the host guard's rules follow the template, not the "
          "profile, so every profile sets the same"]),
        ("no-runtime", profiled(runtime=False),
         ["stack.yaml:51:9: $.pools.web.hosts[0]: host 'local' has no `runtime`, which switches a session's network "
          "profile; template 'web' declares profiles (locked, open): give the host a `runtime`, or place the pool "
          "elsewhere"]),
    ],
    "egress-mode": [
        ("connections-on-allow-list", change("      allow:\n", "      connections: {rate: 10}\n      allow:\n"),
         ["stack.yaml:30:7: $.templates.web.network.connections: `connections` bounds a direct route (unlogged "
          "'allow-all' or `protocols: any`); this policy's egress leaves through the gateway, which bounds its "
          "connections: remove `connections`"]),
        ("protocols-on-allow-list", change("      allow:\n", "      protocols: any\n      allow:\n"), ["stack.yaml:30:7: $.templates.web.network.protocols: `protocols` chooses how logged 'allow-all' egress leaves (through the gateway, or direct with every connection logged); this policy is 'allow-list': remove `protocols`"]),
        ("allow-in-deny-all", change("      egress: allow-list\n", "      egress: deny-all\n"),
         ["stack.yaml:30:7: $.templates.web.network.allow: `allow` entries need 'allow-list' (the destinations it "
          "reaches) or 'allow-all' (the private destinations it reaches too); this policy is 'deny-all'"]),
        # In allow-all an entry names a private destination (PRIVATE_RANGES): one that cannot is refused.
        ("allow-all-wildcard", change("      egress: allow-list\n", "      egress: allow-all\n",
                                      "        - api.example.com\n", "        - '*.corp.example.com'\n"),
         ["stack.yaml:31:11: $.templates.web.network.allow[0]: '*.corp.example.com': in 'allow-all' an `allow` "
          "entry lets the sandbox reach a private address, and a wildcard names no host (anyone who can add a "
          "subdomain could point it there): name the host ('db.example.com') or the address or CIDR"]),
        ("allow-all-public-address", change("      egress: allow-list\n", "      egress: allow-all\n",
                                            "        - api.example.com\n", "        - 203.0.113.7\n"),
         ["stack.yaml:31:11: $.templates.web.network.allow[0]: '203.0.113.7' is not a private address (0.0.0.0/8, "
          "10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, ::1/128, fc00::/7), which "
          "'allow-all' reaches already: in 'allow-all' an `allow` entry names a private destination; remove it"]),
        ("direct-allow-domain", change("      egress: allow-list\n", "      egress: allow-all\n      log: false\n",
                                       "        - api.example.com\n", "        - db.internal\n"),
         ["stack.yaml:32:11: $.templates.web.network.allow[0]: 'db.internal': with `log: false` or `protocols: any` "
          "the sandbox connects directly and the host guard's firewall sees addresses, not names: write the private "
          "address or CIDR (e.g. '10.0.0.5'); or send egress through the gateway (`log: true` with `protocols: "
          "http`)"]),
        ("direct-allow-port", change("      egress: allow-list\n", "      egress: allow-all\n      protocols: any\n",
                                     "        - api.example.com\n", "        - 10.0.0.5:5432\n"),
         ["stack.yaml:32:11: $.templates.web.network.allow[0]: '10.0.0.5:5432': on a direct route the host guard "
          "lets a whole address through (every protocol and port): write '10.0.0.5/32' without the port, or send "
          "egress through the gateway (`log: true` with `protocols: http`), which allows one port"]),
        ("allow-all-private-entries-pass", change("      egress: allow-list\n", "      egress: allow-all\n",
                                                  "        - api.example.com\n",
                                                  "        - 10.0.0.5:5432\n        - db.internal\n"
                                                  "        - '[fd00::7]'\n        - 0.0.0.0/1\n"), []),
        ("empty-allow-list", change("      allow:\n        - api.example.com\n", "      allow: []\n"),
         ["stack.yaml:29:15: $.templates.web.network.egress: 'allow-list' with no `allow` entries allows nothing: "
          "list the destinations, or use 'deny-all'"]),
        ("deny-in-deny-all", change("      allow:\n        - api.example.com\n", "      deny: [x.example.com]\n",
                                    "      egress: allow-list\n", "      egress: deny-all\n"),
         ["stack.yaml:30:7: $.templates.web.network.deny: `deny` entries narrow what is allowed, but nothing is "
          "allowed in 'deny-all'"]),
        ("domain-deny-in-unlogged-allow-all",
         change("      allow:\n        - api.example.com\n", "      log: false\n      deny: [10.0.0.0/8, x.example.com]\n",
                "      egress: allow-list\n", "      egress: allow-all\n"),
         [f"stack.yaml:31:26: $.templates.web.network.deny[1]: 'x.example.com': {DIRECT_DENY}"]),
        ("wildcard-deny-in-unlogged-allow-all",
         change("      allow:\n        - api.example.com\n", "      log: false\n      deny: ['*.example.com:443']\n",
                "      egress: allow-list\n", "      egress: allow-all\n"),
         [f"stack.yaml:31:14: $.templates.web.network.deny[0]: '*.example.com:443': {DIRECT_DENY}"]),
        ("unlogged-allow-list", change("      allow:\n        - api.example.com\n",
                                       "      log: false\n      allow:\n        - api.example.com\n"),
         ["stack.yaml:30:7: $.templates.web.network.log: 'allow-list' egress always goes through the gateway, which "
          "logs every request: remove `log: false` (only 'allow-all' has an unlogged, direct mode)"]),
        ("log-in-deny-all", change("      allow:\n        - api.example.com\n", "      log: true\n",
                                   "      egress: allow-list\n", "      egress: deny-all\n"),
         ["stack.yaml:30:7: $.templates.web.network.log: 'deny-all' has no egress to log: remove `log`"]),
        ("metadata-in-deny-all", change("      allow:\n        - api.example.com\n", "      allow_metadata: true\n",
                                        "      egress: allow-list\n", "      egress: deny-all\n"),
         ["stack.yaml:30:7: $.templates.web.network.allow_metadata: 'deny-all' reaches no address, link-local or "
          "other: remove `allow_metadata`, or pick 'allow-list' or 'allow-all'"]),
    ],
    "egress-metadata": [
        ("metadata-address-allowed-without-opt-in", change("        - api.example.com\n", "        - 169.254.169.254:80\n"),
         ["stack.yaml:31:11: $.templates.web.network.allow[0]: '169.254.169.254:80' is inside 169.254.0.0/16, which "
          "every mode refuses (cloud metadata and link-local addresses) unless `allow_metadata: true`: set it, a "
          "reviewable loosening, or remove the entry"]),
        ("aws-ipv6-metadata-allowed-without-opt-in",
         change("        - api.example.com\n", "        - api.example.com\n        - '[fd00:ec2::254]:80'\n"),
         ["stack.yaml:32:11: $.templates.web.network.allow[1]: '[fd00:ec2::254]:80' is inside fd00:ec2::254/128, "
          "which every mode refuses (cloud metadata and link-local addresses) unless `allow_metadata: true`: set "
          "it, a reviewable loosening, or remove the entry"]),
    ],
    "snapshot-version": [
        ("files-without-version", change('      version: "1"\n', ""),
         ["stack.yaml:21:7: $.templates.web.snapshot: `snapshot.version` is required when there are setup steps "
          "or files: bump it to force a rebuild, e.g. version: '1'"]),
        ("setup-without-version", change('      version: "1"\n', "      setup: [make]\n"),
         ["stack.yaml:21:7: $.templates.web.snapshot: `snapshot.version` is required when there are setup steps "
          "or files: bump it to force a rebuild, e.g. version: '1'"]),
    ],
    "setup-network": [
        ("setup-network-without-steps",
         change('      version: "1"\n', '      version: "1"\n      setup_network: none\n'),
         ["stack.yaml:22:22: $.templates.web.snapshot.setup_network: template 'web' sets `snapshot.setup_network: "
          "none` but has no setup steps: it applies to nothing (only setup steps reach a network during a build); "
          "remove it, or add the steps to `snapshot.setup`"]),
        ("defaults-setup-network-without-steps",
         change("defaults:\n  limits: small\n", "defaults:\n  limits: small\n  snapshot: {setup_network: none}\n"),
         ["stack.yaml:17:29: $.defaults.snapshot.setup_network: `defaults.snapshot` sets `snapshot.setup_network: "
          "none` but has no setup steps: it applies to nothing (only setup steps reach a network during a build); "
          "remove it, or add the steps to `snapshot.setup`"]),
    ],
    "snapshot-file": [
        ("missing-file", change("source: agent.py", "source: missing.py"),
         ["stack.yaml:23:19: $.templates.web.snapshot.files[0].source: 'missing.py' is not a file (looked in "
          "'{folder}')"]),
        ("symlink-out-of-the-folder", change("source: agent.py", "source: escape.py"),
         ["stack.yaml:23:19: $.templates.web.snapshot.files[0].source: 'escape.py' resolves outside the stack "
          "file's folder '{folder}'"]),
    ],
    "unique-host-port": [
        ("replicas-share-a-fixed-port", change("    replicas: 1\n", "    replicas: 2\n"),
         [f"stack.yaml:35:20: $.templates.web.ports[0].host_port: host port 18080/tcp on host 'local' is claimed "
          f"by 2 replicas of pool 'web'; {FIXED_PORT}"]),
        ("two-pools-share-a-fixed-port", change("    replicas: 1\n", "    replicas: 1\n  web2:\n    template: web\n"
                                                                     "    hosts: [local]\n"),
         [f"stack.yaml:35:20: $.templates.web.ports[0].host_port: host port 18080/tcp on host 'local' is claimed "
          f"by pools 'web', 'web2'; {FIXED_PORT}"]),
    ],
    "ondemand-ceiling": [
        ("max-below-replicas", change("    replicas: 1\n", "    replicas: 1\n    max: 0\n"),
         ["stack.yaml:49:10: $.pools.web.max: max 0 is below replicas 1: the ceiling counts the warm sandboxes "
          "too; give at least replicas, or leave max out"]),
    ],
    "ondemand-runtime": [
        ("on-demand-without-runtime", change("        host_port: 18080\n", "", "    replicas: 1\n",
                                             "    replicas: 1\n    max: 2\n"),
         ["stack.yaml:46:9: $.pools.web.hosts[0]: pool 'web' may grow to max 2 on demand, but host 'local' "
          "declares no runtime (`hosts.local.runtime`), which creates them"]),
    ],
    "ondemand-secret-env": [
        ("on-demand-with-a-secret-env", change("        host_port: 18080\n", "", "    replicas: 1\n",
                                               "    replicas: 1\n    max: 2\n", "    capacity:\n",
                                               "    runtime:\n      token: {secret: runtimeToken}\n    capacity:\n",
                                               "    limits:\n      profile: small\n",
                                               "    env:\n      TOKEN: {secret: apiToken}\n    limits:\n"
                                               "      profile: small\n"),
         ["stack.yaml:28:14: $.templates.web.env.TOKEN: env 'TOKEN' of template 'web' is a secret, and pool 'web' "
          "creates sandboxes on demand (max above replicas), whose settings the runtime keeps in clear; give it as "
          "a secret file (`secrets`) instead"]),
    ],
    "hibernated-ceiling": [
        ("hibernated-places-without-on-demand", change(*RUNTIME, "        host_port: 18080\n", "",
                                                       "    replicas: 1\n", "    replicas: 1\n    max_hibernated: 2\n"),
         ["stack.yaml:50:21: $.pools.web.max_hibernated: max_hibernated 2 counts sessions hibernated in on-demand "
          "places, but pool 'web' runs none (max 1 is its replicas): raise max above replicas, or leave "
          "max_hibernated out"]),
        ("none-hibernated-but-idle-hibernates", change(*RUNTIME, "        host_port: 18080\n", "",
                                                       "    replicas: 1\n",
                                                       "    replicas: 1\n    max: 2\n    max_hibernated: 0\n",
                                                       "    secrets:\n", "    session:\n      idle: hibernate\n"
                                                       "    secrets:\n"),
         ["stack.yaml:53:21: $.pools.web.max_hibernated: max_hibernated 0 refuses every hibernation of an on-demand "
          "sandbox, but template 'web' hibernates its idle sessions (`session.idle: hibernate`): give at least 1, or "
          "leave max_hibernated out"]),
    ],
    "unique-ports": [
        ("container-port-twice", change("    ports:\n", "    ports:\n      - port: 8080\n"),
         ["stack.yaml:34:15: $.templates.web.ports[1].port: port 8080/tcp is declared twice"]),
        ("host-port-with-exposure-none", change("        exposure: host\n", "        exposure: none\n"),
         ["stack.yaml:35:20: $.templates.web.ports[0].host_port: `host_port` needs exposure 'host' or 'public'; "
          "exposure 'none' publishes nothing"]),
    ],
    "host-capacity": [
        ("memory-over-capacity", change("      memory: 512MiB\n", "      memory: 16GiB\n"),
         ["stack.yaml:8:15: $.hosts.local.capacity.memory: pools on host 'local' need 16GiB of memory (web: 1 × "
          "16GiB) but capacity 8GiB × overcommit 1 allows 8GiB"]),
        ("cpus-over-capacity", change("      cpus: 4\n", "      cpus: 0.25\n"),
         ["stack.yaml:7:13: $.hosts.local.capacity.cpus: pools on host 'local' need 0.5 of cpus (web: 1 × 0.5) but "
          "capacity 0.25 × overcommit 1 allows 0.25"]),
        ("memory-over-overcommit", change("      memory: 512MiB\n", "      memory: 16GiB\n",
                                          "    capacity:\n", "    overcommit: {memory: 1.5}\n    capacity:\n"),
         ["stack.yaml:9:15: $.hosts.local.capacity.memory: pools on host 'local' need 16GiB of memory (web: 1 × "
          "16GiB) but capacity 8GiB × overcommit 1.5 allows 12GiB"]),
    ],
    "gpu-host": [
        ("host-without-gpus", change("      memory: 512MiB\n", "      memory: 512MiB\n      gpus: {count: 1}\n"),
         ["stack.yaml:48:9: $.pools.web.hosts[0]: template 'web' requests GPUs but host 'local' declares none "
          "(`hosts.*.capacity.gpus`)"]),
        ("host-with-other-gpu-type",
         change("      memory: 512MiB\n", "      memory: 512MiB\n      gpus: {count: 1, type: nvidia-h100}\n",
                "      disk: 20GiB\n", "      disk: 20GiB\n      gpus: [{type: nvidia-l4, count: 1}]\n"),
         ["stack.yaml:49:9: $.pools.web.hosts[0]: template 'web' requests nvidia-h100 GPUs but host 'local' has "
          "only nvidia-l4"]),
        ("more-gpus-than-the-host-has",
         change("      memory: 512MiB\n", "      memory: 512MiB\n      gpus: {count: 2, type: nvidia-l4}\n",
                "      disk: 20GiB\n", "      disk: 20GiB\n      gpus: [{type: nvidia-l4, count: 1}]\n"),
         ["stack.yaml:50:15: $.pools.web.replicas: pools on host 'local' request 2 nvidia-l4 GPUs; it has 1"]),
    ],
    "base-image": [
        ("no-base-image-anywhere", change("    base_image: python:3.12-slim\n", ""),
         ["stack.yaml:19:5: $.templates.web: template 'web' has no `base_image`: set it, or inherit one from the "
          "template it `extends` or from `defaults`"]),
    ],
    "data-source": [
        ("missing-source", change("    base_image: python:3.12-slim\n", "    base_image: python:3.12-slim\n"
                                  "    data: [{source: skills, path: /opt/skills}]\n"),
         ["stack.yaml:20:21: $.templates.web.data[0].source: 'skills' is neither a file nor a folder (looked in "
          "'{folder}')"]),
        ("secrets-folder", change("    base_image: python:3.12-slim\n", "    base_image: python:3.12-slim\n"
                                  "    data: [{source: stack.yaml, path: /run/secrets}]\n"),
         ["stack.yaml:20:39: $.templates.web.data[0].path: '/run/secrets' is taken (another data mount, the root or "
          "the secrets folder): mount data at a path of its own, e.g. '/opt/skills'"]),
    ],
    "sudo": [
        ("sudo-for-root", change("    base_image: python:3.12-slim\n", "    base_image: python:3.12-slim\n"
                                 "    user: '0:0'\n    security: {sudo: true}\n"),
         ["stack.yaml:20:11: $.templates.web.user: `security.sudo` is for a non-root user, not '0:0': root needs no "
          "sudo; set a user such as '10001:10001' or drop sudo"]),
        ("sudo-with-no-new-privileges", change("    base_image: python:3.12-slim\n", "    base_image: python:3.12-slim\n"
                                               "    security: {sudo: true, no_new_privileges: true}\n"),
         ["stack.yaml:20:47: $.templates.web.security.no_new_privileges: `security.sudo` needs setuid, which "
          "`no_new_privileges: true` forbids: remove one of them"]),
    ],
    "disk-workspace": [
        ("too-small", change("    capacity:\n", "    disk_workspaces: 1GiB\n    capacity:\n",
                             "          size: 64MiB\n", "          size: 64MiB\n        - {path: /work, type: disk, size: 8MiB}\n"),
         ["stack.yaml:41:43: $.templates.web.filesystem.writable[1].size: a disk workspace of 8MiB at '/work' is too small to hold anything after ext4's own metadata: at least 16MiB"]),
        ("not-whole-mib", change("    capacity:\n", "    disk_workspaces: 1GiB\n    capacity:\n",
                                 "          size: 64MiB\n", "          size: 64MiB\n        - {path: /work, type: disk, size: 20000000}\n"),
         ["stack.yaml:41:43: $.templates.web.filesystem.writable[1].size: a disk workspace's size is in whole MiB; 20000000 bytes at '/work' is not, e.g. use 19MiB"]),
        ("seed-on-tmpfs", change("          size: 64MiB\n", "          size: 64MiB\n          seed: true\n"), ["stack.yaml:40:17: $.templates.web.filesystem.writable[0].seed: `seed` fills a new disk workspace from the image; '/tmp' is a tmpfs: set `type: disk` or remove `seed`"]),
    ],
    "disk-workspace-host": [
        ("host-without-disk-workspaces", change("          size: 64MiB\n", "          size: 64MiB\n        - {path: /work, type: disk, size: 32MiB}\n"),
         ["stack.yaml:48:7: $.pools.web.hosts: pool 'web' has disk workspaces (template 'web': /work) but host 'local' declares no `disk_workspaces`, so their sizes could not be enforced there: declare `hosts.local.disk_workspaces` (the disk it sets aside for them) or make the paths tmpfs"]),
        ("over-the-hosts-share", change("    capacity:\n", "    disk_workspaces: 16MiB\n    capacity:\n",
                                        "          size: 64MiB\n", "          size: 64MiB\n        - {path: /work, type: disk, size: 32MiB}\n"),
         ["stack.yaml:6:22: $.hosts.local.disk_workspaces: disk workspaces on host 'local' add up to 32MiB (pool 'web' 1 × 32MiB), more than its `disk_workspaces` 16MiB"]),
    ],
    "url-port": [
        ("url-with-host-port", change("        exposure: host\n", "        exposure: url\n", "    capacity:\n",
                                      "    ingress: {domain: sbx.example.com}\n    capacity:\n"), ["stack.yaml:36:20: $.templates.web.ports[0].host_port: port 8080 has `exposure: url`, which publishes nothing on the host: remove `host_port`, or use exposure 'host' or 'public'"]),
    ],
    "url-ingress": [
        ("url-without-ingress", change("        exposure: host\n        host_port: 18080\n", "        exposure: url\n"),
         ["stack.yaml:46:7: $.pools.web.hosts: pool 'web' has url ports (8080, template 'web') but host 'local' declares no `ingress`: declare `hosts.local.ingress` with its domain, or use exposure 'host' or 'public'"]),
        ("tls-and-acme", change("    capacity:\n", "    ingress: {domain: sbx.example.com, acme_email: ops@example.com, "
                                "tls: {cert: {secret: c}, key: {secret: k}}}\n    capacity:\n"), ["stack.yaml:6:52: $.hosts.local.ingress.acme_email: an ingress gets its certificate either from `tls` (secrets) or from ACME (`acme_email`), not both: remove one"]),
    ],
    "platform": [
        ("a-platform-no-host-offers", change("    base_image: python:3.12-slim\n",
                                             "    base_image: python:3.12-slim\n    platform: linux/arm64\n"),
         ["stack.yaml:48:9: $.pools.web.hosts[0]: pool 'web' places template 'web' (platform 'linux/arm64') on host "
          "'local', which offers 'linux/amd64' only; no host of the stack offers it: add it to "
          "`hosts.local.platforms` if that host runs it (natively or under emulation), or build the template for "
          "'linux/amd64'"]),
        ("another-host-offers-it", change("    base_image: python:3.12-slim\n",
                                          "    base_image: python:3.12-slim\n    platform: linux/arm64\n",
                                          "profiles:\n", "  arm:\n    endpoint: ssh://deploy@arm.example.com\n"
                                          "    platforms: [linux/arm64]\n    capacity: {cpus: 4, memory: 8GiB, disk: "
                                          "20GiB}\nprofiles:\n"),
         ["stack.yaml:52:9: $.pools.web.hosts[0]: pool 'web' places template 'web' (platform 'linux/arm64') on host "
          "'local', which offers 'linux/amd64' only; hosts offering it: 'arm': place the pool on them, or add it to "
          "`hosts.local.platforms` if that host runs it (natively or under emulation)"]),
        ("listed-twice", change("    capacity:\n", "    platforms: [linux/amd64, linux/amd64]\n    capacity:\n"),
         ["stack.yaml:6:30: $.hosts.local.platforms[1]: 'linux/amd64' is listed twice"]),
        ("from-the-defaults", change("  limits: small\n", "  limits: small\n  platform: linux/arm64\n"),
         ["stack.yaml:48:9: $.pools.web.hosts[0]: pool 'web' places template 'web' (platform 'linux/arm64') on host "
          "'local', which offers 'linux/amd64' only; no host of the stack offers it: add it to "
          "`hosts.local.platforms` if that host runs it (natively or under emulation), or build the template for "
          "'linux/amd64'"]),
    ],
    "env-reference": [
        ("no-url-port", change("    ports:\n", "    env:\n      PUBLIC_URL: https://${SANDSTACK_URL_APP}/\n    ports:\n"),
         ["stack.yaml:33:19: $.templates.web.env.PUBLIC_URL: `${SANDSTACK_URL_APP}` in `PUBLIC_URL` names no variable "
          "sandstack gives template 'web''s sandboxes (it has no `exposure: url` port, so no SANDSTACK_URL_…); use one "
          "of `${SANDSTACK_PUBLIC_HOSTNAME}` (`$${…}` for the literal text)"]),
        ("a-typo", change("    ports:\n", "    env:\n      ALLOWED: ${SANDSTACK_PUBLIC_HOST},x\n    ports:\n",
                          "        exposure: host\n        host_port: 18080\n", "        exposure: url\n        name: app\n",
                          "    capacity:\n", "    ingress: {domain: sbx.example.com}\n    capacity:\n"),
         ["stack.yaml:34:16: $.templates.web.env.ALLOWED: `${SANDSTACK_PUBLIC_HOST}` in `ALLOWED` names no variable "
          "sandstack gives template 'web''s sandboxes; use one of `${SANDSTACK_PUBLIC_HOSTNAME}`, "
          "`${SANDSTACK_URL_APP}` (`$${…}` for the literal text)"]),
    ],
    "env-reference-ingress": [
        ("host-without-ingress", change("    ports:\n", "    env:\n      ALLOWED: ${SANDSTACK_PUBLIC_HOSTNAME}\n    ports:\n"),
         ["stack.yaml:33:16: $.templates.web.env.ALLOWED: `${SANDSTACK_PUBLIC_HOSTNAME}` in `ALLOWED` (template 'web') "
          "needs the public host name an ingress gives, but pool 'web' runs on host 'local', which declares no "
          "`ingress`: declare `hosts.local.ingress` or remove the reference"]),
        ("in-the-defaults", change("  limits: small\n", "  limits: small\n  env:\n    ORIGIN: ${SANDSTACK_PUBLIC_HOSTNAME}\n"),
         ["stack.yaml:18:13: $.defaults.env.ORIGIN: `${SANDSTACK_PUBLIC_HOSTNAME}` in `ORIGIN` (template 'web') needs "
          "the public host name an ingress gives, but pool 'web' runs on host 'local', which declares no `ingress`: "
          "declare `hosts.local.ingress` or remove the reference"]),
    ],
    "gpu-ids": [
        ("fewer-ids-than-count",
         change("      disk: 20GiB\n", "      disk: 20GiB\n      gpus: [{type: nvidia-l4, count: 2, ids: ['0']}]\n"),
         ["stack.yaml:10:47: $.hosts.local.capacity.gpus[0].ids: 1 device ids for 2 nvidia-l4 GPUs: list exactly "
          "`count` ids"]),
        ("an-id-twice",
         change("      disk: 20GiB\n", "      disk: 20GiB\n      gpus: [{type: nvidia-l4, count: 1, ids: ['GPU-1234abcd']},"
                " {type: nvidia-a100, count: 1, ids: ['GPU-1234abcd']}]\n"),
         ["stack.yaml:10:102: $.hosts.local.capacity.gpus[1].ids[0]: device id 'GPU-1234abcd' is listed twice on host "
          "'local'"]),
    ],
    "disk-enforced": [
        ("writable-paths-exceed-disk", change("    disk: 256MiB\n", "    disk: 32MiB\n"),
         ["stack.yaml:37:7: $.templates.web.filesystem: writable paths add up to 64MiB, more than `limits.disk` "
          "32MiB"]),
        ("writable-root-without-storage-quota",
         change("    filesystem:\n", "    filesystem:\n      read_only_root: false\n"),
         ["stack.yaml:37:23: $.templates.web.filesystem.read_only_root: a writable root cannot be held to "
          "`limits.disk` on host 'local' (pool 'web'): it has no `storage_quota`; keep the root read-only and "
          "declare writable paths"]),
    ],
    "writable-memory": [
        ("writable-paths-fill-memory", change("      memory: 512MiB\n", "      memory: 96MiB\n"),
         [f"stack.yaml:37:7: $.templates.web.filesystem: {FULL_TMPFS.format(96, 108)}"]),
        ("shm-fills-memory", change("    filesystem:\n", "    filesystem:\n      shm_size: 448MiB\n"),
         ["stack.yaml:37:7: $.templates.web.filesystem: writable paths and /dev/shm can hold 512MiB (/tmp 64MiB, "
          "/dev/shm 448MiB), leaving less than 32MiB of `limits.memory` 512MiB for processes: tmpfs files are "
          "memory, so full paths would get the sandbox's next process OOM-killed; shrink the paths or "
          "`filesystem.shm_size`, or raise `limits.memory` to at least 544MiB"]),
        ("defaults-tmp-fills-the-templates-memory",
         change("      memory: 512MiB\n", "      memory: 100MiB\n",
                "    filesystem:\n      writable:\n        - path: /tmp\n          size: 64MiB\n", "",
                "  limits: small\n", "  limits: small\n  filesystem: {writable: [{path: /tmp, size: 64MiB}]}\n"),
         [f"stack.yaml:28:15: $.templates.web.limits.memory: {FULL_TMPFS.format(100, 108)}"]),
        ("defaults-shm-fills-memory", change("  limits: small\n", "  limits: small\n  filesystem: {shm_size: 480MiB}\n"),
         ["stack.yaml:38:7: $.templates.web.filesystem: writable paths and /dev/shm can hold 544MiB (/tmp 64MiB, "
          "/dev/shm 480MiB), leaving less than 32MiB of `limits.memory` 512MiB for processes: tmpfs files are "
          "memory, so full paths would get the sandbox's next process OOM-killed; shrink the paths or "
          "`filesystem.shm_size`, or raise `limits.memory` to at least 576MiB"]),
    ],
    "writable-size": [
        ("writable-path-of-size-zero", change("          size: 64MiB\n", "          size: 0\n"),
         ["stack.yaml:39:17: $.templates.web.filesystem.writable[0].size: size 0 would leave '/tmp' unbounded "
          "(tmpfs reads 0 as no limit): give it a size, e.g. '64MiB', or remove the path"]),
        ("writable-path-of-size-zero-in-defaults",
         change("  limits: small\n", "  limits: small\n  filesystem: {writable: [{path: /w, size: 0B}]}\n"),
         ["stack.yaml:17:44: $.defaults.filesystem.writable[0].size: size 0 would leave '/w' unbounded (tmpfs "
          "reads 0 as no limit): give it a size, e.g. '64MiB', or remove the path"]),
    ],
    "unique-paths": [
        ("writable-path-twice", change("          size: 64MiB\n", "          size: 64MiB\n        - path: /tmp\n"),
         ["stack.yaml:40:17: $.templates.web.filesystem.writable[1].path: '/tmp' is declared twice"]),
        ("writable-path-twice-in-defaults",
         change("  limits: small\n", "  limits: small\n  filesystem: {writable: [{path: /w}, {path: /w}]}\n"),
         ["stack.yaml:17:46: $.defaults.filesystem.writable[1].path: '/w' is declared twice"]),
        ("writable-path-on-the-secrets-mount",
         change("        - path: /tmp\n", "        - path: /run/secrets/cache\n"),
         ["stack.yaml:38:17: $.templates.web.filesystem.writable[0].path: '/run/secrets/cache' is inside "
          "'/run/secrets', where secret files are mounted read-only"]),
        ("writable-path-on-the-guard-state", change("        - path: /tmp\n", "        - path: /run/sandstack\n"),
         ["stack.yaml:38:17: $.templates.web.filesystem.writable[0].path: '/run/sandstack' is inside "
          "'/run/sandstack', where sandstack mounts the host guard's state"]),
        ("secret-path-twice", change("        path: /run/secrets/token\n", "        path: /run/secrets/token\n"
                                     "      - secret: other\n        path: /run/secrets/token\n"),
         ["stack.yaml:44:15: $.templates.web.secrets[1].path: '/run/secrets/token' is declared twice"]),
    ],
    "secret-path": [
        ("secret-outside-run-secrets", change("        path: /run/secrets/token\n", "        path: /etc/token\n"),
         ["stack.yaml:42:15: $.templates.web.secrets[0].path: '/etc/token' must be under /run/secrets/: secret "
          "files are delivered on a read-only mount there, e.g. '/run/secrets/token'"]),
        ("secret-is-the-mount-itself", change("        path: /run/secrets/token\n", "        path: /run/secrets\n"),
         ["stack.yaml:42:15: $.templates.web.secrets[0].path: '/run/secrets' must be under /run/secrets/: secret "
          "files are delivered on a read-only mount there, e.g. '/run/secrets/token'"]),
        ("secret-in-the-session-secrets", change("        path: /run/secrets/token\n",
                                                 "        path: /run/secrets/session/token\n"),
         ["stack.yaml:42:15: $.templates.web.secrets[0].path: '/run/secrets/session/token' is under "
          "/run/secrets/session/, where the runtime puts a session's own secret files: choose another path under "
          "/run/secrets/, e.g. '/run/secrets/token'"]),
    ],
    "secret-user": [
        ("named-user-with-secrets", change("    secrets:\n", "    user: node\n    secrets:\n"),
         ["stack.yaml:40:11: $.templates.web.user: user 'node' must be numeric ('uid' or 'uid:gid') in a template "
          "with secrets: the files are owned by that uid before the image's user names are known"]),
        ("named-default-user-with-secrets", change("  limits: small\n", "  limits: small\n  user: app:app\n"),
         ["stack.yaml:17:9: $.defaults.user: user 'app:app' must be numeric ('uid' or 'uid:gid') in a template "
          "with secrets: the files are owned by that uid before the image's user names are known"]),
    ],
    "subnet-pool": [
        ("host-bits-set", change("    capacity:\n", "    subnet_pool: 10.213.0.1/16\n    capacity:\n"),
         ["stack.yaml:6:18: $.hosts.local.subnet_pool: '10.213.0.1/16' is not an IPv4 network (10.213.0.1/16 has "
          "host bits set); did you mean '10.213.0.0/16'?"]),
        ("smaller-than-a-pool", change("    capacity:\n", "    subnet_pool: 10.213.0.0/24\n    capacity:\n"),
         ["stack.yaml:6:18: $.hosts.local.subnet_pool: '10.213.0.0/24' is smaller than one pool's /23: use a prefix "
          "of /23 or shorter, e.g. '10.213.0.0/16'"]),
        ("more-pools-than-networks",
         change("    capacity:\n", "    subnet_pool: 10.213.0.0/23\n    capacity:\n",
                "    replicas: 1\n", "    replicas: 1\n  web2:\n    template: web\n    hosts: [local]\n"
                                     "    replicas: 0\n"),
         ["stack.yaml:6:18: $.hosts.local.subnet_pool: '10.213.0.0/23' has room for 1 pool network (/23 each) but 2 "
          "pools and the gateway's egress network are placed on host 'local': use a larger network"]),
        # An allow-list pool egresses through the gateway, whose egress network takes a /23 of its own.
        ("no-room-for-the-gateway", change("    capacity:\n", "    subnet_pool: 10.213.0.0/23\n    capacity:\n"),
         ["stack.yaml:6:18: $.hosts.local.subnet_pool: '10.213.0.0/23' has room for 1 pool network (/23 each) but 1 "
          "pool and the gateway's egress network are placed on host 'local': use a larger network"]),
        # An ingress beside a runtime has a network with a fixed subnet (to reach the runtime): a /23 too.
        ("no-room-for-the-ingress", change("    capacity:\n", "    subnet_pool: 10.213.0.0/22\n"
                                           "    ingress: {domain: sbx.example.com}\n"
                                           "    runtime:\n      token: {secret: runtimeToken}\n    capacity:\n"),
         ["stack.yaml:6:18: $.hosts.local.subnet_pool: '10.213.0.0/22' has room for 2 pool networks (/23 each) but 1 "
          "pool, the gateway's egress network and the ingress's network are placed on host 'local': use a larger "
          "network"]),
    ],
    "capabilities-user": [
        ("capability-for-the-default-user", change("    secrets:\n", "    security: {capabilities: [CHOWN]}\n    secrets:\n"),
         ["stack.yaml:40:30: $.templates.web.security.capabilities: ['CHOWN'] cannot take effect for user "
          "'10001:10001': Docker gives a non-root user added capabilities only in its bounding set, never "
          "effective; run the template as user '0:0' (it keeps only these capabilities, a read-only root and "
          "no-new-privileges) or remove them"]),
        ("capability-in-defaults", change("  limits: small\n", "  limits: small\n  security: {capabilities: [KILL]}\n"),
         ["stack.yaml:17:28: $.defaults.security.capabilities: ['KILL'] cannot take effect for user "
          "'10001:10001': Docker gives a non-root user added capabilities only in its bounding set, never "
          "effective; run the template as user '0:0' (it keeps only these capabilities, a read-only root and "
          "no-new-privileges) or remove them"]),
    ],
    "memory-unit": [
        ("memory-not-whole-mib", change("      memory: 512MiB\n", "      memory: 1.5KiB\n"),
         ["stack.yaml:27:15: $.templates.web.limits.memory: 1.50KiB cannot be enforced exactly: Docker limits "
          "memory in whole MiB, at least 6MiB"]),
        ("memory-below-docker-minimum", change("    memory: 256MiB\n", "    memory: 4MiB\n"),
         ["stack.yaml:13:13: $.profiles.small.memory: 4MiB cannot be enforced exactly: Docker limits memory in "
          "whole MiB, at least 6MiB"]),
        ("shm-not-whole-mib", change("    filesystem:\n", "    filesystem:\n      shm_size: 1.5MiB\n"),
         ["stack.yaml:37:17: $.templates.web.filesystem.shm_size: 1536KiB cannot be enforced exactly: Docker sizes "
          "/dev/shm in whole MiB, at least 1MiB"]),
        # A decimal unit says so and names the binary size with the same number, and the whole MiB below.
        ("memory-in-decimal-gigabytes", change("      memory: 512MiB\n", "      memory: 2GB\n"),
         ["stack.yaml:27:15: $.templates.web.limits.memory: '2GB' is a decimal size (2,000,000,000 bytes) and Docker "
          "limits memory in whole MiB: use '2GiB' (2,147,483,648 bytes) or '1907MiB' (1,999,634,432 bytes)"]),
        ("memory-decimal-without-an-exact-binary-twin", change("    memory: 256MiB\n", "    memory: 1.3GB\n"),
         ["stack.yaml:13:13: $.profiles.small.memory: '1.3GB' is a decimal size (1,300,000,000 bytes) and Docker "
          "limits memory in whole MiB: use '1239MiB' (1,299,185,664 bytes)"]),
        ("shm-in-decimal-megabytes", change("    filesystem:\n", "    filesystem:\n      shm_size: 64MB\n"),
         ["stack.yaml:37:17: $.templates.web.filesystem.shm_size: '64MB' is a decimal size (64,000,000 bytes) and "
          "Docker sizes /dev/shm in whole MiB: use '64MiB' (67,108,864 bytes) or '61MiB' (63,963,136 bytes)"]),
        ("shm-zero-in-defaults", change("  limits: small\n", "  limits: small\n  filesystem: {shm_size: 0}\n"),
         ["stack.yaml:17:26: $.defaults.filesystem.shm_size: 0B cannot be enforced exactly: Docker sizes /dev/shm "
          "in whole MiB, at least 1MiB"]),
    ],
    "exec-limits": [
        ("timeout-and-output-past-the-runtimes-bounds",
         change("    filesystem:\n", "    session: {exec_max_timeout: 2d, exec_output_limit: 128MiB}\n    filesystem:\n"),
         ["stack.yaml:36:33: $.templates.web.session.exec_max_timeout: exec_max_timeout '2d' is longer than the "
          "runtime allows: at most '1d'",
          "stack.yaml:36:56: $.templates.web.session.exec_output_limit: exec_output_limit '128MiB' is more than the "
          "runtime keeps of one stream: at most '64MiB'"]),
        ("timeout-in-defaults", change("  limits: small\n", "  limits: small\n  session: {exec_max_timeout: 25h}\n"),
         ["stack.yaml:17:31: $.defaults.session.exec_max_timeout: exec_max_timeout '25h' is longer than the runtime "
          "allows: at most '1d'"]),
    ],
    "session-runtime": [
        ("hibernate-without-runtime", change("    secrets:\n", "    session:\n      idle: hibernate\n    secrets:\n"),
         ["stack.yaml:49:7: $.pools.web.hosts: template 'web' hibernates idle sessions (`templates.web.session.idle: "
          "hibernate`), but no host of pool 'web' (local) declares a runtime, which binds sessions and hibernates "
          "them: its sandboxes would never hibernate; add `runtime` to a host, or set another `session.idle`"]),
        ("hibernate-in-defaults", change("  limits: small\n", "  limits: small\n  session:\n    idle: hibernate\n"),
         ["stack.yaml:49:7: $.pools.web.hosts: template 'web' hibernates idle sessions (`defaults.session.idle: "
          "hibernate`), but no host of pool 'web' (local) declares a runtime, which binds sessions and hibernates "
          "them: its sandboxes would never hibernate; add `runtime` to a host, or set another `session.idle`"]),
    ],
    "url-auth": [
        ("session-auth-without-a-url-port", change("    secrets:\n", "    urls: {auth: session}\n    secrets:\n"),
         ["stack.yaml:40:18: $.templates.web.urls.auth: template 'web' (pool 'web') asks for session tokens on its "
          "URLs, but has no port with `exposure: url`: nothing to guard; add a url port or remove `urls.auth`"]),
    ],
    "connection-bounds": [
        ("rate-above-the-default-pool-rate",
         change("      egress: allow-list\n      allow:\n        - api.example.com\n",
                "      egress: allow-all\n      log: false\n      connections: {rate: 500}\n"),
         ["stack.yaml:31:27: $.templates.web.network.connections.rate: `connections.rate` 500 (new connections per "
          "second per sandbox) is above `connections.pool_rate` 400 (the whole pool's): the pool's bound refuses "
          "first, so a sandbox never gets more than 400; lower `rate` to at most 400, or raise `pool_rate`"]),
        ("open-above-pool-open",
         change("      egress: allow-list\n      allow:\n        - api.example.com\n",
                "      egress: allow-all\n      log: false\n      connections: {open: 100, pool_open: 50}\n"),
         ["stack.yaml:31:27: $.templates.web.network.connections.open: `connections.open` 100 (open connections per "
          "sandbox) is above `connections.pool_open` 50 (the whole pool's): the pool's bound refuses first, so a "
          "sandbox never gets more than 50; lower `open` to at most 50, or raise `pool_open`"]),
    ],
    "snapshot-storage": [
        ("pools-snapshot-storage-past-the-hosts-disk",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n",
                "    filesystem:\n", "    session: {snapshot_storage: 24GiB}\n    filesystem:\n"),
         ["stack.yaml:9:13: $.hosts.local.capacity.disk: the runtime on host 'local' may keep 24GiB of snapshots and "
          "hibernation copies (web: 24GiB: each pool's `session.snapshot_storage`) but its capacity.disk is 20GiB: "
          "lower `snapshot_storage` or raise the capacity"]),
    ],
    "size-declared": [
        ("an-empty-map", change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n", "    replicas: 1\n", "    replicas: 1\n    sizes: {}\n"),
         ["stack.yaml:51:12: $.pools.web.sizes: pool 'web' declares an empty map of size classes: give at least one "
          "(e.g. `large: {cpus: 2, memory: 4GiB}`), or leave `sizes` out"]),
    ],
    "size-runtime": [
        ("no-runtime", change("    replicas: 1\n", "    replicas: 1\n    sizes: {large: {cpus: 2}}\n"),
         ["stack.yaml:47:9: $.pools.web.hosts[0]: pool 'web' declares size classes, which the runtime applies at "
          "claim time, but host 'local' declares no runtime (`hosts.local.runtime`)"]),
    ],
    "size-host": [
        ("more-cpus-than-the-host",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    overcommit: {cpus: 2}\n    runtime:\n      token: {secret: runtimeToken}\n",
                "    replicas: 1\n", "    replicas: 1\n    sizes: {huge: {cpus: 6}}\n"),
         ["stack.yaml:52:26: $.pools.web.sizes.huge.cpus: size class 'huge' of pool 'web' gives one sandbox 6 CPUs "
          "but host 'local' has 4 (`hosts.local.capacity.cpus`): no sandbox can be given more than its host has"]),
    ],
    "size-memory": [
        ("under-the-tmpfs", change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n", "    replicas: 1\n", "    replicas: 1\n    sizes: {tiny: {memory: 96MiB}}\n"),
         ["stack.yaml:51:28: $.pools.web.sizes.tiny.memory: size class 'tiny' of pool 'web' has 96MiB of memory but "
          "template 'web''s tmpfs paths and /dev/shm can hold 80MiB, leaving less than 32MiB for processes: give it "
          "at least 112MiB"]),
    ],
    "size-disk": [
        ("another-disk-without-on-demand", change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n", "    replicas: 1\n",
                                                  "    replicas: 1\n    sizes: {big: {disk: 1GiB}}\n"),
         ["stack.yaml:51:25: $.pools.web.sizes.big.disk: size class 'big' of pool 'web' has 1GiB of disk, not the "
          "pool's 256MiB: a running sandbox's disk cannot change, so only a sandbox created on demand for the claim "
          "can have it, and the pool has no ceiling above its warm sandboxes: set `max` above `replicas`, or leave "
          "the class's disk out"]),
    ],
    "runtime-tokens": [
        ("host-secret-and-unknown-pool",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
                "      tokens:\n        tenant: {secret: runtimeToken, pools: [web, nope]}\n"),
         ["stack.yaml:13:26: $.hosts.local.runtime.tokens.tenant.secret: scoped token 'tenant' uses the host's own "
          "token secret 'runtimeToken', which acts on every pool: give it a secret of its own",
          "stack.yaml:13:53: $.hosts.local.runtime.tokens.tenant.pools[1]: scoped token 'tenant' names pool 'nope', "
          "which is not defined; pools on host 'local': web"]),
    ],
    "runtime-ssh": [
        ("the-api-port-and-the-token-secret",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
                "      ssh: {port: 7480, host_key: {secret: runtimeToken}}\n"),
         ["stack.yaml:12:19: $.hosts.local.runtime.ssh.port: SSH port 7480 is the runtime API's port "
          "(`hosts.local.runtime.port`) on host 'local': give the SSH endpoint a port of its own",
          "stack.yaml:12:44: $.hosts.local.runtime.ssh.host_key.secret: the SSH host key's secret 'runtimeToken' is "
          "also the runtime's token's on host 'local': a token is not a private key; give the host key a secret of "
          "its own"]),
        ("a-scoped-token-s-secret",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
                "      tokens:\n        tenant: {secret: tenantToken, pools: [web]}\n"
                "      ssh: {host_key: {secret: tenantToken}}\n"),
         ["stack.yaml:14:32: $.hosts.local.runtime.ssh.host_key.secret: the SSH host key's secret 'tenantToken' is "
          "also scoped token 'tenant''s on host 'local': a token is not a private key; give the host key a secret "
          "of its own"]),
    ],
    "snapshot-store": [
        ("plain-http-elsewhere-a-ca-and-the-token-s-secret",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
                "      snapshot_store: {registry: 'http://10.0.0.5:5000', username: snapshots,\n"
                "                       password: {secret: runtimeToken}, ca: {secret: storeCa}}\n"),
         ["stack.yaml:12:34: $.hosts.local.runtime.snapshot_store.registry: registry 'http://10.0.0.5:5000' is plain "
          "http on another machine: it would carry the store's password and the sessions' files in clear; use "
          "https:// (plain http only for a registry on the host itself: 127.0.0.1, localhost)",
          "stack.yaml:13:43: $.hosts.local.runtime.snapshot_store.password.secret: the snapshot store's password "
          "secret 'runtimeToken' is also the runtime's token's on host 'local': a token's holders would know the "
          "store's password; give it a secret of its own",
          "stack.yaml:13:62: $.hosts.local.runtime.snapshot_store.ca: registry 'http://10.0.0.5:5000' is plain http: "
          "a CA checks an https registry's certificate; use https:// or leave `ca` out"]),
        ("hosts-of-a-pool-with-different-stores",
         change("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
                "      snapshot_store: {registry: 'https://registry.internal', username: snapshots,\n"
                "                       password: {secret: storePassword}}\n"
                "  other:\n    endpoint: unix:///run/other.sock\n    capacity: {cpus: 4, memory: 8GiB, disk: 20GiB}\n"
                "    runtime:\n      token: {secret: otherToken}\n",
                "      - local\n", "      - local\n      - other\n"),
         ["stack.yaml:57:9: $.pools.web.hosts[1]: pool 'web' is on host 'local' with snapshot store "
          "https://registry.internal/sandstack and on host 'other' with no snapshot store: a snapshot taken on one "
          "would not be found on the other; declare the same `runtime.snapshot_store` registry and repository on "
          "every host of the pool"]),
    ],
}

CASES = [(rule_id, *case) for rule_id, cases in RULE_CASES.items() for case in cases]


@pytest.mark.parametrize("rule_id", list(RULES))
def test_every_rule_has_a_failing_case(rule_id: str) -> None:
    assert RULE_CASES.get(rule_id), f"rule {rule_id!r} has no case in RULE_CASES"


def test_every_case_names_a_registered_rule() -> None:
    assert sorted(set(RULE_CASES) - set(RULES)) == []


@pytest.mark.parametrize(("rule_id", "text", "expected"), [(c[0], c[2], c[3]) for c in CASES],
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_rule(tmp_path, check, rule_id: str, text: str, expected: list[str]) -> None:
    (tmp_path / "escape.py").symlink_to("/etc/hostname")
    diagnostics = check(text)
    folder = str(tmp_path.resolve())
    assert lines(diagnostics) == [line.replace("{folder}", folder) for line in expected]
    assert [d.rule for d in diagnostics] == [rule_id] * len(expected)


@pytest.mark.parametrize("rule_id", list(RULES))
def test_rule_ids_are_stable_kebab_case_names(rule_id: str) -> None:
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule_id)
    assert RULES[rule_id].rule_id == rule_id  # type: ignore[attr-defined]


def test_all_rule_errors_are_reported_at_once_and_sorted(check) -> None:
    text = change("    template: web\n", "    template: wbe\n", "        - api.example.com\n", "        - '*'\n",
                  "unix:///var/run/docker.sock", "tcp://docker.example.com:2376")
    diagnostics = check(text)
    assert [(d.line, d.column, d.rule) for d in diagnostics] == [
        (5, 15, "host-endpoint"), (31, 11, "egress-entry"), (45, 15, "ref-template")]


def test_a_broken_reference_is_reported_once(check) -> None:
    """A pool whose template is missing is not also checked for capacity, ports or GPUs."""
    text = change("    template: web\n", "    template: nope\n", "      memory: 512MiB\n", "      memory: 16GiB\n")
    assert [d.rule for d in check(text)] == ["ref-template"]


def test_an_unknown_profile_is_reported_once(check) -> None:
    text = change("      profile: small\n", "      profile: nope\n")
    assert [d.rule for d in check(text)] == ["ref-profile"]


def test_pools_with_zero_replicas_need_no_capacity_or_fixed_port(check) -> None:
    text = change("    replicas: 1\n", "    replicas: 0\n", "      memory: 512MiB\n", "      memory: 16GiB\n")
    assert check(text) == []


def test_disk_rule_counts_the_writable_paths_the_sandbox_gets(check) -> None:
    """An explicit `writable: []` is no writable path, not the defaults' list: nothing to exceed the disk."""
    text = change("  limits: small\n", "  limits: small\n  filesystem: {writable: [{path: /big, size: 10GiB}]}\n",
                  "      writable:\n        - path: /tmp\n          size: 64MiB\n", "      writable: []\n")
    assert check(text) == []


def test_disk_rule_counts_inherited_writable_paths(check) -> None:
    text = change("  limits: small\n", "  limits: small\n  filesystem: {writable: [{path: /big, size: 300MiB}]}\n",
                  "    filesystem:\n      writable:\n        - path: /tmp\n          size: 64MiB\n", "")
    assert lines(check(text)) == [
        "stack.yaml:20:5: $.templates.web.filesystem: writable paths add up to 300MiB, more than `limits.disk` "
        "256MiB"]


def test_metadata_entries_pass_once_the_template_opts_in(check) -> None:
    text = change("        - api.example.com\n", "        - 169.254.169.254:80\n        - fe80::/64\n"
                  "      allow_metadata: true\n")
    assert check(text) == []


def test_a_network_merely_overlapping_the_metadata_ranges_is_not_refused(check) -> None:
    """128.0.0.0/1 also covers 169.254.0.0/16; the gateway still refuses that part, the rest is allowed."""
    assert check(change("        - api.example.com\n", "        - 128.0.0.0/1\n")) == []


def test_unlogged_allow_all_accepts_address_and_cidr_deny_entries(check) -> None:
    """No gateway on that path: the host guard's firewall enforces them, so addresses and CIDRs are enough."""
    text = change("      allow:\n        - api.example.com\n",
                  "      log: false\n      deny: [203.0.113.7, '10.0.0.0/8:443', '[2001:db8::1]:22', 2001:db8::/32]\n",
                  "      egress: allow-list\n", "      egress: allow-all\n")
    assert check(text) == []


def test_logged_allow_all_still_accepts_domain_deny_entries(check) -> None:
    text = change("      allow:\n        - api.example.com\n", "      deny: [x.example.com, '*.example.org']\n",
                  "      egress: allow-list\n", "      egress: allow-all\n")
    assert check(text) == []


def test_writable_memory_leaves_exactly_the_headroom(check) -> None:
    """64MiB /tmp + 13MiB /dev/shm (an eighth of 109MiB) + 32MiB for processes = 109MiB: that limit passes."""
    assert check(change("      memory: 512MiB\n", "      memory: 109MiB\n")) == []
    assert [d.rule for d in check(change("      memory: 512MiB\n", "      memory: 108MiB\n"))] == ["writable-memory"]


def test_built_in_writable_sizes_scale_down_so_a_small_sandbox_validates(check) -> None:
    """No `filesystem` at all and 16MiB of memory: /tmp 4MiB + /dev/shm 2MiB leave half of it (8MiB)."""
    text = change("      memory: 512MiB\n", "      memory: 16MiB\n",
                  "    filesystem:\n      writable:\n        - path: /tmp\n          size: 64MiB\n", "")
    assert check(text) == []


def test_writable_memory_counts_the_writable_paths_the_sandbox_gets(check) -> None:
    """`writable: []` is no /tmp at all: only /dev/shm and the headroom must fit."""
    text = change("      memory: 512MiB\n", "      memory: 48MiB\n", "      writable:\n        - path: /tmp\n"
                  "          size: 64MiB\n", "      writable: []\n")
    assert check(text) == []


def test_writable_memory_uses_the_profile_memory_when_the_template_sets_none(check) -> None:
    text = change("      memory: 512MiB\n", "", "    memory: 256MiB\n", "    memory: 100MiB\n")
    assert lines(check(text)) == [f"stack.yaml:36:7: $.templates.web.filesystem: {FULL_TMPFS.format(100, 108)}"]


def test_capacity_counts_the_ceiling_not_only_the_warm_sandboxes(check) -> None:
    # 1 warm sandbox of 512MiB fits 8GiB; a ceiling of 20 does not.
    text = change("        host_port: 18080\n", "", "    replicas: 1\n", "    replicas: 1\n    max: 20\n",
                  "    capacity:\n", "    runtime:\n      token: {secret: runtimeToken}\n    capacity:\n")
    assert [d.rule for d in check(text)] == ["host-capacity", "host-capacity"]
    assert check(change("        host_port: 18080\n", "", "    replicas: 1\n", "    replicas: 1\n    max: 4\n",
                        "    capacity:\n", "    runtime:\n      token: {secret: runtimeToken}\n    capacity:\n")) == []


def test_hibernation_needs_a_runtime_on_some_host_of_the_pool_only(check) -> None:
    # A pool with a runtime on one of its hosts hibernates there: legitimate, no error.
    runtime = "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n"
    hibernating = change("    secrets:\n", "    session:\n      idle: hibernate\n    secrets:\n",
                         "      disk: 20GiB\n", runtime)
    assert lines(check(hibernating)) == []


def test_bounds_at_the_pool_s_are_accepted(check) -> None:
    equal = change("      egress: allow-list\n      allow:\n        - api.example.com\n",
                   "      egress: allow-all\n      log: false\n      connections: {rate: 400, open: 4096}\n")
    assert lines(check(equal)) == []

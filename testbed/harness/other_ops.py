"""Applies Network, Volume and RemoteImage plans to the daemon the way the provider does.

Network: resource_docker_network_funcs.go (create 26-82, read 160-203, delete with retry while
"has active endpoints" 110-135/205-225). Volume: resource_docker_volume.go (create 166-238, delete
with retry while in use 362-386). RemoteImage: resource_docker_image_funcs.go (create 34-56, read
103-132, removeImage 187-220) and data_source_docker_image.go determineRepoDigest (66-100).
"""

from __future__ import annotations

import re
import time

import docker.errors

from testbed.provider.other_maps import ImagePlan
from testbed.provider.mocks import HarnessError

REMOVE_RETRY_SECONDS = 30  # the provider's networkRemoveRefreshTimeout


def _retry_remove(remove, busy_markers: tuple[str, ...]) -> str:
    deadline = time.monotonic() + REMOVE_RETRY_SECONDS
    while True:
        try:
            remove()
            return "removed"
        except docker.errors.NotFound:
            return "already gone"
        except docker.errors.APIError as error:
            text = str(error.explanation or error).lower()
            if not any(marker in text for marker in busy_markers) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# --- Network -----------------------------------------------------------------------------------------

def create_network(api, body: dict, labels: dict[str, str]) -> str:
    # POST /networks/create with the provider's CreateOptions (network_funcs.go:32-75).
    result = api.create_network(body["Name"], driver=body["Driver"], options=body["Options"], ipam=body["IPAM"],
                                internal=body["Internal"], labels={**(body["Labels"] or {}), **labels},
                                enable_ipv6=body["EnableIPv6"], attachable=body["Attachable"], ingress=body["Ingress"])
    return result["Id"]


def read_network(api, network_id: str, inputs: dict) -> dict:
    info = api.inspect_network(network_id)
    ipam = info.get("IPAM") or {}
    return {**inputs, "name": info["Name"], "driver": info["Driver"], "internal": info.get("Internal", False),
            "attachable": info.get("Attachable", False), "ingress": info.get("Ingress", False),
            "ipv6": info.get("EnableIPv6", False), "scope": info.get("Scope", ""), "options": info.get("Options") or {},
            "ipamDriver": ipam.get("Driver", ""), "ipamOptions": ipam.get("Options") or {},
            "ipamConfigs": [{"subnet": c.get("Subnet", ""), "ipRange": c.get("IPRange", ""), "gateway": c.get("Gateway", ""),
                             "auxAddress": c.get("AuxiliaryAddresses") or {}} for c in ipam.get("Config") or []]}


def delete_network(api, network_id: str) -> str:
    return _retry_remove(lambda: api.remove_network(network_id), ("has active endpoints",))


# --- Volume ------------------------------------------------------------------------------------------

def create_volume(api, body: dict, labels: dict[str, str]) -> str:
    result = api.create_volume(body["Name"], driver=body["Driver"], driver_opts=body["DriverOpts"],
                               labels={**body["Labels"], **labels})
    return result["Name"]  # the provider sets the id to the volume name


def read_volume(api, name: str, inputs: dict) -> dict:
    info = api.inspect_volume(name)
    return {**inputs, "name": info["Name"], "driver": info["Driver"], "mountpoint": info.get("Mountpoint", "")}


def delete_volume(api, name: str) -> str:
    return _retry_remove(lambda: api.remove_volume(name), ("volume is in use",))


# --- RemoteImage -------------------------------------------------------------------------------------

_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def build_image(api, plan: ImagePlan, labels: dict[str, str], urn: str) -> list[str]:
    """Classic-builder build tagged `name` (+ build.tags); returns the build log lines."""
    kwargs = dict(plan.build)
    kwargs["labels"] = {**kwargs["labels"], **labels}
    streamed: list[str] = []
    error = None
    try:
        for chunk in api.build(tag=plan.name, decode=True, **{k: v for k, v in kwargs.items() if v is not None}):
            if "stream" in chunk:
                streamed.append(chunk["stream"])
            if "error" in chunk:
                error = chunk["error"].strip()
    except (docker.errors.APIError, TypeError, OSError) as failure:  # e.g. missing context dir / Dockerfile
        error = str(failure)
    # Chunks are not lines: a step's unbuffered stderr arrives a few characters at a time on a busy daemon, and a
    # tail of chunks then held the last characters of its message, not its last lines. The daemon colours each chunk
    # of stderr (`ESC[91m` … `ESC[0m`): without those codes, a message cut in chunks reads as it was written.
    log = _COLOURS.sub("", "".join(streamed)).splitlines()
    if plan.build_log_file:
        with open(plan.build_log_file, "w") as handle:
            handle.write("\n".join(log) + "\n")
    if error:
        tail = "\n".join(log[-15:])
        raise HarnessError(f"{urn}: Error running legacy build of {plan.name!r} (context {plan.build['path']!r}): "
                           f"{error}\n--- last build output ---\n{tail}")
    for extra in plan.extra_tags:
        repository, _, tag = extra.partition(":")
        api.tag(plan.name, repository, tag or "latest")
    return log


def ensure_image(api, name: str, urn: str) -> None:
    try:
        api.inspect_image(name)
    except docker.errors.ImageNotFound:
        raise HarnessError(f"{urn}: RemoteImage {name!r} without build: the image is not on this daemon and the "
                           f"harness never pulls (the provider would). Build it first (testbed/images.py) "
                           f"or give the RemoteImage a build") from None


def read_image(api, name: str, inputs: dict) -> tuple[str, dict]:
    info = api.inspect_image(name)
    digests = info.get("RepoDigests") or []
    repo_digest = ""
    if len(digests) == 1:
        repo_digest = digests[0]
    elif digests:  # determineRepoDigest: the digest of the repository named by `name`
        bare = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
        repo_digest = next((d for d in digests if d.startswith(bare + "@")), "")
    outputs = {**inputs, "imageId": info["Id"], "repoDigest": repo_digest}
    return info["Id"] + name, outputs  # resource id = image id + name (image_funcs.go:54)


def delete_image(api, name: str, image_id: str, plan: ImagePlan, session_label: tuple[str, str], urn: str) -> str:
    """removeImage: by NAME, force = force_remove, nothing when keep_locally."""
    if plan.keep_locally:
        return "kept (keepLocally)"
    try:
        current = api.inspect_image(name)
    except docker.errors.ImageNotFound:
        return "already gone"
    key, value = session_label
    ours = ((current.get("Config") or {}).get("Labels") or {}).get(key) == value
    if current["Id"] != image_id:
        if not ours:
            return "kept: its name now points to an image this harness session did not build"
        raise HarnessError(
            f"deleting {urn}: the provider removes images by name ({name!r}), which now names the image that "
            f"replaced it ({current['Id'][:19]}, was {image_id[:19]}); it would untag or delete the NEW image "
            f"(image_funcs.go removeImage:187-220). Give every build its own name/tag (e.g. the version), or set "
            f"keepLocally")
    if not ours:
        return "kept: not built by this harness session (the provider would remove it unless keepLocally)"
    try:
        api.remove_image(name, force=plan.force_remove)
    except docker.errors.ImageNotFound:
        return "already gone"
    return "removed"

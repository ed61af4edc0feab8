"""Every resource type the harness maps, by the type token the Python SDK registers.

Anything not in MAPPINGS is refused (UnsupportedResourceError) by both the recording mocks and the
engine harness, e.g. `docker:index/image:Image` (builds AND pushes by default) or `docker:index/service:Service`.
"""

from __future__ import annotations

from testbed.provider.container_map import CONTAINER
from testbed.provider.other_maps import NETWORK, REGISTRY_IMAGE, REMOTE_IMAGE, VOLUME
from testbed.provider.schema import ResourceMapping

MAPPINGS: dict[str, ResourceMapping] = {m.token: m for m in (CONTAINER, NETWORK, VOLUME, REMOTE_IMAGE, REGISTRY_IMAGE)}

#: `pulumi:providers:docker` inputs. Providers are recorded, never refused at registration; the engine
#: harness refuses a resource whose provider points anywhere but the local daemon's unix socket, or sets
#: anything besides `host` (TLS material, ssh options, registry auth would be silently unused).
PROVIDER_TOKEN = "pulumi:providers:docker"
PROVIDER_LOCAL_FIELDS = frozenset({"host", "disableDockerDaemonCheck", "version"})

"""What pulumi-docker does with a change of each input, per resource type: replace the resource (ForceNew upstream),
update it in place, or only record the new value in its state (shown as an update, never applied).

Source: kreuzwerker/terraform-provider-docker v4.5.0 (commit 5074970c), which pulumi-docker 5.2 bridges:
internal/provider/resource_docker_container.go (the schema's ForceNew flags) and
resource_docker_container_funcs.go `resourceDockerContainerUpdate` (what the update applies: memory, swap, CPU
shares and set, restart policy, block-IO throttles, must_run); resource_docker_network.go (every input
ForceNew); resource_docker_volume.go (every input ForceNew); resource_docker_image.go (RemoteImage: `name`,
`build`, `triggers`, `platform`, `pull_triggers` ForceNew; `keep_locally`, `force_remove` state-only);
resource_docker_registry_image.go (`name`, `triggers` ForceNew; `keep_remotely`, `insecure_skip_verify`
state-only). Wire (camelCase) input names. testbed/provider models the same provider field by field; a test
(tests/differential/test_provider_table.py) keeps the two equal.
"""

from __future__ import annotations

REPLACE, UPDATE, STATE_ONLY = "replace", "update", "state-only"

# type token → (ForceNew inputs, inputs updated in place, state-only inputs). An input in none of them is ForceNew.
TABLE: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    'docker:index/container:Container': (
        frozenset({
            'capabilities', 'cgroupParent', 'cgroupnsMode', 'command', 'cpus', 'deviceCgroupRules', 'deviceRequests',
            'devices', 'dns', 'dnsOpts', 'dnsSearches', 'domainname', 'entrypoints', 'envs', 'gpus', 'groupAdds',
            'hostname', 'hosts', 'image', 'ipcMode', 'labels', 'logDriver', 'logOpts', 'mounts', 'name',
            'networkMode', 'networksAdvanced', 'pidMode', 'platform', 'ports', 'privileged', 'publishAllPorts',
            'readOnly', 'runtime', 'securityOpts', 'shmSize', 'stdinOpen', 'stopSignal', 'stopTimeout', 'storageOpts',
            'sysctls', 'tty', 'ulimits', 'uploads', 'user', 'usernsMode', 'volumes', 'workingDir'
        }),
        frozenset({
            'cpuSet', 'cpuShares', 'deviceReadBps', 'deviceReadIops', 'deviceWriteBps', 'deviceWriteIops',
            'maxRetryCount', 'memory', 'memoryReservation', 'memorySwap', 'mustRun', 'restart'
        }),
        frozenset({
            'attach', 'containerReadRefreshTimeoutMilliseconds', 'cpuPeriod', 'cpuQuota', 'destroyGraceSeconds',
            'healthcheck', 'init', 'logs', 'removeVolumes', 'rm', 'start', 'tmpfs', 'wait', 'waitTimeout'
        }),
    ),
    'docker:index/network:Network': (
        frozenset({
            'attachable', 'driver', 'ingress', 'internal', 'ipamConfigs', 'ipamDriver', 'ipamOptions', 'ipv6',
            'labels', 'name', 'options'
        }),
        frozenset(),
        frozenset(),
    ),
    'docker:index/volume:Volume': (
        frozenset({'driver', 'driverOpts', 'labels', 'name'}),
        frozenset(),
        frozenset(),
    ),
    'docker:index/remoteImage:RemoteImage': (
        frozenset({'build', 'name', 'platform', 'pullTriggers', 'triggers'}),
        frozenset(),
        frozenset({'forceRemove', 'keepLocally'}),
    ),
    'docker:index/registryImage:RegistryImage': (
        frozenset({'authConfig', 'build', 'name', 'triggers'}),
        frozenset(),
        frozenset({'insecureSkipVerify', 'keepRemotely'}),
    ),
}


def change_of(token: str, name: str) -> str:
    """How the provider applies a change of input `name` (wire name) of a `token` resource."""
    _, update, state_only = TABLE.get(token, (frozenset(), frozenset(), frozenset()))
    return UPDATE if name in update else STATE_ONLY if name in state_only else REPLACE

"""Plan values in pulumi-docker's shapes: labels, bridge options, health checks and run settings (the one place
the plan's plain values need the provider SDK)."""

from __future__ import annotations

from typing import Any, Mapping

import pulumi_docker as docker

from sandstack.plan.container import Healthcheck, RunSettings


def container_labels(values: Mapping[str, str]) -> list[docker.ContainerLabelArgs]:
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in values.items()]


def network_labels(values: Mapping[str, str]) -> list[docker.NetworkLabelArgs]:
    return [docker.NetworkLabelArgs(label=k, value=v) for k, v in values.items()]


def volume_labels(values: Mapping[str, str]) -> list[docker.VolumeLabelArgs]:
    return [docker.VolumeLabelArgs(label=k, value=v) for k, v in values.items()]


def bridge_options(bridge: str, *, icc: bool = False) -> dict[str, str]:
    # Without icc, containers on one bridge cannot talk to each other; the guard opens only the gateway's port and
    # the ingress's way to url ports.
    return {"com.docker.network.bridge.name": bridge, "com.docker.network.bridge.enable_icc": str(icc).lower()}


def healthcheck_args(check: Healthcheck | None) -> docker.ContainerHealthcheckArgs | None:
    if check is None:
        return None
    return docker.ContainerHealthcheckArgs(tests=list(check.tests), interval=check.interval, timeout=check.timeout,
                                           retries=check.retries, start_period=check.start_period)


def run_args(run: RunSettings) -> dict[str, Any]:
    """A container's run settings as `docker.Container` keyword arguments (None values are inputs left unset)."""
    return {"restart": run.restart, "max_retry_count": run.max_retry_count,
            "destroy_grace_seconds": run.destroy_grace_seconds, "healthcheck": healthcheck_args(run.healthcheck),
            "wait": run.wait, "wait_timeout": run.wait_timeout, "log_driver": run.logs.driver,
            "log_opts": run.logs.opts}

"""Label inputs in pulumi-docker's shapes (the one place `naming` needs the provider SDK)."""

from __future__ import annotations

from typing import Mapping

import pulumi_docker as docker


def container_labels(values: Mapping[str, str]) -> list[docker.ContainerLabelArgs]:
    return [docker.ContainerLabelArgs(label=k, value=v) for k, v in values.items()]


def network_labels(values: Mapping[str, str]) -> list[docker.NetworkLabelArgs]:
    return [docker.NetworkLabelArgs(label=k, value=v) for k, v in values.items()]


def volume_labels(values: Mapping[str, str]) -> list[docker.VolumeLabelArgs]:
    return [docker.VolumeLabelArgs(label=k, value=v) for k, v in values.items()]

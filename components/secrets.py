"""Secret references in a spec (`{secret: key}`) resolved to Pulumi secret config values."""

from __future__ import annotations

import pulumi


def secret_value(key: str) -> pulumi.Output[str]:
    """`apiToken` reads the project's namespace, `ns:apiToken` another one; missing keys fail `pulumi up`
    with Pulumi's own message naming the key and `pulumi config set --secret`."""
    namespace, _, name = key.rpartition(":")
    config = pulumi.Config(namespace) if namespace else pulumi.Config()
    return config.require_secret(name)

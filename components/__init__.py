"""`sandstack.components`: the Pulumi components, one per module (`SandboxStack` composes the others).

    from sandstack.components import SandboxStack, SandboxStackArgs

Files they read at run time (the host guard's and the supervisor's scripts, the infra image's Dockerfile)
are package data under `assets/` (read by `sandstack.plan.package_files`).
"""

__all__ = ["SandboxStack", "SandboxStackArgs"]


def __getattr__(name: str):
    # Lazily: the plan layer reads this package's assets and must import without Pulumi.
    if name in __all__:
        from sandstack.components import sandbox_stack

        return getattr(sandbox_stack, name)
    raise AttributeError(f"module 'sandstack.components' has no attribute {name!r}")

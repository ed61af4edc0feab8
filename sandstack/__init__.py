"""sandstack: sandboxes for AI agents, declared as code.

Layers point one way: `sandstack.spec` (models, schema, loader, errors) → `components`
(Pulumi resources) → `sandstack.tooling` (validate, preview, CLI).
"""

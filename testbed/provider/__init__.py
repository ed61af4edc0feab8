"""A model of pulumi-docker for tests, with no Docker: the recording mocks (`mocks`) and the provider's
resource types and fields (`tables`: how each input maps to the Docker Engine API, citing
terraform-provider-docker, and whether the provider updates it in place or replaces).

Component tests use it through the mocks; the engine harness (testbed/harness) applies the same
translation to a real daemon. It imports neither the harness nor the spec builders (testbed/specs.py)."""

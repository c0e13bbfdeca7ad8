"""A kubesim with the ray.io CRDs for the CLI's component tests."""

from tests.fixtures.kubesim import kubesim_namespace, kubesim_server  # noqa: F401

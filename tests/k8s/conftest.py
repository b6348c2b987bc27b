"""The Kubernetes tests' fixtures (``fake_api``, ``helm``) live in tests/k8s_fixtures.py, shared with the
canary tests through the root conftest's ``pytest_plugins``."""

"""Real Prometheus / Pushgateway fixtures come from tests/prom_fixtures.py via the root conftest."""

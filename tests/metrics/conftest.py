"""Real Prometheus / Pushgateway fixtures shared with tests/canary (see tests/prom_fixtures.py)."""

import sys
from pathlib import Path

# tests/ is not a package: make tests/prom_fixtures.py importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prom_fixtures import prometheus_factory, pushgateway  # noqa: E402,F401

"""Fixtures of the data tests: the fault-injecting HTTP server on 127.0.0.1 (tests/helpers/fault_server.py)."""

from fault_server import fault_server  # noqa: F401  (a pytest fixture, registered by being imported here)

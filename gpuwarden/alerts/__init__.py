"""Alerting: Prometheus rules shipped with gpuwarden (``rules/``), and later the receivers."""

from pathlib import Path

#: The shipped Prometheus alert rules; point Prometheus' ``rule_files`` at it.
RULES_FILE = Path(__file__).parent / "rules" / "gpuwarden.rules.yml"

"""Alerting and decisions: shipped Prometheus rules and the risk loop's decision path.

    rules/            Prometheus alert rules (``RULES_FILE``)
    base.py           GpuState, RiskAssessment, Transition, Notice, the Notifier protocol
    decision.py       the decision state machine (hysteresis, hard signals, manual overrides)
    hard_signals.py   an assessor from the store alone: DBE, remap failure, lost GPU, fatal Xid
    audit.py          the SQLite audit table of decisions and actions
    alertmanager.py   Alertmanager's v4 webhook payload -> decision-engine inputs
    slack.py          the Slack notifier (grouped, rate-limited Block Kit messages)

Nothing heavy is imported here: ``slack.py`` needs slack-sdk and ``alertmanager.py`` pydantic,
both only when used.
"""

from pathlib import Path

#: The shipped Prometheus alert rules; point Prometheus' ``rule_files`` at it.
RULES_FILE = Path(__file__).parent / "rules" / "gpuwarden.rules.yml"

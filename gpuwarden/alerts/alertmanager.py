"""Alertmanager's webhook (payload version 4) turned into decision-engine inputs.

Alertmanager POSTs ``{"version": "4", "status", "receiver", "alerts": [{"status", "labels",
"annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}], "groupLabels",
"commonLabels", "commonAnnotations", "externalURL", "groupKey", "truncatedAlerts"}``.

A payload is checked whole before anything is applied: one malformed alert rejects the request
(400, naming the field), so a bad sender can never half-apply a group. Alerts about one GPU
(labels ``UUID``, ``gpu`` and ``Hostname`` or ``hostname``, as both gpuwarden's exporter and
dcgm-exporter label them) drive the decision engine according to ``ALERT_EFFECTS``; other
alerts are accepted and ignored, with the reason in the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState
from gpuwarden.httpguard import loads_json
from gpuwarden.telemetry import GpuId

#: alertname -> what a firing alert does to its GPU (see gpuwarden/alerts/rules/).
ALERT_EFFECTS: dict[str, GpuState] = {
    "GpuAtRisk": GpuState.AT_RISK,
    "GpuRowRemapPending": GpuState.AT_RISK,
    "GpuPcieReplayStorm": GpuState.AT_RISK,
    "GpuThermalSpread": GpuState.AT_RISK,
    "GpuUnhealthy": GpuState.UNHEALTHY,
    "GpuFatalXid": GpuState.UNHEALTHY,
    "GpuFatalXidDcgm": GpuState.UNHEALTHY,
    "GpuUncorrectableEcc": GpuState.UNHEALTHY,
    "GpuRowRemapFailure": GpuState.UNHEALTHY,
    "GpuDown": GpuState.UNHEALTHY,
}

_Label = Annotated[str, StringConstraints(max_length=4096)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class AmAlert(_Strict):
    status: Literal["firing", "resolved"]
    labels: dict[_Label, _Label]
    annotations: dict[_Label, _Label] = Field(default_factory=dict)
    startsAt: datetime = Field(strict=False)
    endsAt: datetime | None = Field(default=None, strict=False)
    generatorURL: str = ""
    fingerprint: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class AmPayload(_Strict):
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str = ""
    alerts: list[AmAlert] = Field(max_length=10_000)
    groupKey: str = ""
    truncatedAlerts: int = 0


@dataclass(frozen=True)
class AlertInput:
    """One alert as the decision engine takes it (``effect`` None: accepted, not acted on)."""

    key: str
    name: str
    firing: bool
    gpu: GpuId | None
    effect: GpuState | None
    signal_ts: float
    reasons: tuple[str, ...]
    action: str
    ignored: str = ""  # why it does not act, when it does not


def parse_webhook(body: bytes) -> AmPayload:
    """Validate a webhook body; InputError names the first problems (the 400's reason)."""
    data = loads_json(body)  # nesting bounded: a RecursionError would be a 500
    if not isinstance(data, dict):
        raise InputError(f"body must be a JSON object, not {type(data).__name__}")
    try:
        return AmPayload.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3]
        ]
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise InputError(
            "not an Alertmanager v4 webhook payload: " + "; ".join(problems) + more
        ) from None


def _gpu(labels: dict[str, str]) -> GpuId | str:
    """The GPU an alert is about, or why it is not about one."""
    host = labels.get("Hostname") or labels.get("hostname")
    uuid, index = labels.get("UUID"), labels.get("gpu")
    if not (host and uuid and index is not None):
        return "not about one GPU (needs labels Hostname, gpu and UUID)"
    if not index.isdigit() or len(index) > 6:
        return f"label gpu={index!r} is not a GPU index"
    model = labels.get("modelName", "")
    return GpuId(host, int(index), uuid, labels.get("pci_bus_id", ""), model)


def _unix(when: datetime) -> float:
    # a naive time is UTC (Alertmanager always sends Z); never ask the OS about year 1
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH).total_seconds()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def alert_inputs(
    payload: AmPayload, effects: dict[str, GpuState] | None = None
) -> list[AlertInput]:
    """What each alert of ``payload`` means for the decision engine."""
    effects = ALERT_EFFECTS if effects is None else effects
    out = []
    for a in payload.alerts:
        name = a.labels.get("alertname", "")
        found = _gpu(a.labels)
        gpu = found if isinstance(found, GpuId) else None
        summary = a.annotations.get("summary") or a.annotations.get("description") or ""
        reasons = (f"{name}: {summary}" if summary else f"alert {name} is firing",)
        action = a.annotations.get("action") or a.annotations.get("runbook_url") or ""
        effect = effects.get(name)
        ignored = ""
        if isinstance(found, str):
            ignored = found
        elif effect is None:
            ignored = f"alert {name or '(no alertname)'} does not change GPU state"
        out.append(
            AlertInput(
                key=a.fingerprint,
                name=name,
                firing=a.status == "firing",
                gpu=gpu,
                effect=None if ignored else effect,
                signal_ts=_unix(a.startsAt),
                reasons=reasons,
                action=action,
                ignored=ignored,
            )
        )
    return out


__all__ = ["ALERT_EFFECTS", "AlertInput", "AmAlert", "AmPayload", "alert_inputs", "parse_webhook"]

"""The decision part of ``gpuwarden serve``'s ``/metrics`` (the telemetry part is the Exporter's).

- ``gpuwarden_risk_score{Hostname,gpu,UUID}``: the latest risk (0..1); a GPU whose risk is
  unknown has no sample, never 0;
- ``gpuwarden_gpu_state{Hostname,gpu,UUID,state}``: a state set, 1 for the current state of
  ok / at-risk / unhealthy and 0 for the others (the shipped alert rules read both);
- ``gpuwarden_decisions_total{from,to,source}``, ``gpuwarden_hook_actions_total{hook,result}``,
  ``gpuwarden_circuit_breaker_open{hook}``, ``gpuwarden_circuit_breaker_refusals_total{hook}``,
  ``gpuwarden_held_retags{hook}``, ``gpuwarden_alertmanager_alerts_total{outcome}``,
  ``gpuwarden_webhook_requests_total{code}``, ``gpuwarden_assess_runs_total``,
  ``gpuwarden_assess_errors_total``, ``gpuwarden_assess_last_success_timestamp_seconds``,
  ``gpuwarden_assess_duration_seconds``, ``gpuwarden_replaced_board_assessments_skipped_total``
  (a scorer's assessments of boards the store says were replaced in their slot);
- when serve scores with the model and has a week of HBM temperatures:
  ``gpuwarden_fleet_spread_drift_celsius``, how much the HBM-core spread moves from day to day
  on the fleet's median GPU (``models.score.fleet_spread_drift``);
- when serve scores with the model, ``gpuwarden_fleet_error_level{feature,quantile}`` and
  ``gpuwarden_fleet_error_level_limit{feature,quantile}``: the fleet's correctable errors and
  PCIe replays (``models.score.error_level``) and the level serve warns above;
- with ``--spool``, per spool directory (``spool`` label): ``gpuwarden_spool_pending_batches``,
  ``gpuwarden_spool_bytes``, ``gpuwarden_spool_replayed_batches_total`` and
  ``gpuwarden_spool_dropped_batches_total{reason}`` (``size``, ``age``, or ``rejected`` by the
  store).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuwarden.health import GpuState
from gpuwarden.serve.assessors import model_error_level, model_spread_drift
from gpuwarden.store.spool import Spool

if TYPE_CHECKING:
    from gpuwarden.serve.service import RiskService

_GPU_LABELS = ["Hostname", "gpu", "UUID"]


class _DecisionCollector:
    def __init__(self, service: RiskService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        s = self.service
        risk = GaugeMetricFamily(
            "gpuwarden_risk_score",
            "Calibrated probability that the GPU fails within the model's horizon (0..1).",
            labels=_GPU_LABELS,
        )
        state = GaugeMetricFamily(
            "gpuwarden_gpu_state",
            "GPU scheduling state: 1 for the current one of ok, at-risk, unhealthy.",
            labels=[*_GPU_LABELS, "state"],
        )
        for st in s.engine.statuses():
            ids = [st.gpu.hostname, str(st.gpu.index), st.gpu.uuid]
            if not math.isnan(st.risk):
                risk.add_metric(ids, st.risk)
            for name in GpuState:
                state.add_metric([*ids, str(name)], 1.0 if st.state is name else 0.0)
        yield risk
        yield state

        c = s.counters
        decisions = CounterMetricFamily(
            "gpuwarden_decisions", "GPU state changes.", labels=["from", "to", "source"]
        )
        for (old, new, source), n in sorted(c.decisions.items()):
            decisions.add_metric([old, new, source], n)
        yield decisions
        hooks = CounterMetricFamily(
            "gpuwarden_hook_actions",
            "Re-tags attempted per scheduler hook, by result (ok, unchanged, failed, blocked, dry-run).",
            labels=["hook", "result"],
        )
        for (hook, result), n in sorted(c.hook_results.items()):
            hooks.add_metric([hook, result], n)
        yield hooks
        open_ = GaugeMetricFamily(
            "gpuwarden_circuit_breaker_open",
            "1 while the hook's circuit breaker refuses further re-tags.",
            labels=["hook"],
        )
        refusals = CounterMetricFamily(
            "gpuwarden_circuit_breaker_refusals",
            "Re-tags the circuit breaker refused.",
            labels=["hook"],
        )
        held = GaugeMetricFamily(
            "gpuwarden_held_retags",
            "Node re-tags refused by the breaker and waiting for a person.",
            labels=["hook"],
        )
        for t in s.taggers:
            open_.add_metric([t.name], 1.0 if t.is_open() else 0.0)
            refusals.add_metric([t.name], t.trips)
            held.add_metric([t.name], sum(1 for (h, _) in s.actor.held if h == t.name))
        yield open_
        yield refusals
        yield held
        alerts = CounterMetricFamily(
            "gpuwarden_alertmanager_alerts",
            "Alerts received from Alertmanager, by outcome.",
            labels=["outcome"],
        )
        for outcome, n in sorted(c.alerts.items()):
            alerts.add_metric([outcome], n)
        yield alerts
        requests = CounterMetricFamily(
            "gpuwarden_webhook_requests",
            "Requests to POST /alertmanager, by HTTP status.",
            labels=["code"],
        )
        for code, n in sorted(c.webhook_requests.items()):
            requests.add_metric([str(code)], n)
        yield requests
        yield CounterMetricFamily("gpuwarden_assess_runs", "Scoring runs.", value=c.assess_runs)
        yield CounterMetricFamily(
            "gpuwarden_assess_errors", "Scoring runs that failed.", value=c.assess_errors
        )
        yield CounterMetricFamily(
            "gpuwarden_replaced_board_assessments_skipped",
            "Assessments left out: they named a board replaced in its slot.",
            value=c.replaced_boards_skipped,
        )
        if c.assess_last_ok_ts is not None:
            yield GaugeMetricFamily(
                "gpuwarden_assess_last_success_timestamp_seconds",
                "Unix time of the last successful scoring run.",
                value=c.assess_last_ok_ts,
            )
        if c.assess_duration_s is not None:
            yield GaugeMetricFamily(
                "gpuwarden_assess_duration_seconds",
                "How long the last scoring run took.",
                value=c.assess_duration_s,
            )
        drift = model_spread_drift()
        if drift is not None:
            yield GaugeMetricFamily(
                "gpuwarden_fleet_spread_drift_celsius",
                "Day-to-day standard deviation of the HBM-core temperature spread on the "
                "fleet's median GPU over the last week, as the model last saw it; serve logs "
                "a warning above what the model was trained on (docs/models.md).",
                value=drift,
            )
        yield from _level_metrics()
        yield from _spool_metrics(s)


def _level_metrics() -> Iterator[Metric]:
    level, limit = model_error_level()
    if not level:
        return
    labels = ["feature", "quantile"]
    now = GaugeMetricFamily(
        "gpuwarden_fleet_error_level",
        "The fleet's correctable errors and PCIe replays as the model last saw them: this "
        "quantile over its GPUs of the feature (models.score.error_level).",
        labels=labels,
    )
    line = GaugeMetricFamily(
        "gpuwarden_fleet_error_level_limit",
        "The level above which serve warns: twice the highest its training fleets read "
        "(the card's error_level_trained).",
        labels=labels,
    )
    for key, value in sorted(level.items()):
        feature, _, q = key.partition("@")
        now.add_metric([feature, q], value)
        if key in limit:
            line.add_metric([feature, q], limit[key])
    yield now
    if limit:
        yield line


def _spool_metrics(service: RiskService) -> Iterator[Metric]:
    spools = {id(x): x for x in (service.store, service.verdicts.store) if isinstance(x, Spool)}
    if not spools:
        return
    pending = GaugeMetricFamily(
        "gpuwarden_spool_pending_batches",
        "Writes waiting on disk for their store.",
        labels=["spool"],
    )
    size = GaugeMetricFamily(
        "gpuwarden_spool_bytes", "Disk the waiting writes take (compressed).", labels=["spool"]
    )
    replayed = CounterMetricFamily(
        "gpuwarden_spool_replayed_batches",
        "Spooled writes the store took once it was back.",
        labels=["spool"],
    )
    dropped = CounterMetricFamily(
        "gpuwarden_spool_dropped_batches",
        "Spooled writes dropped: the spool was full (size), they were too old (age), or the "
        "store refused them (rejected).",
        labels=["spool", "reason"],
    )
    for spool in spools.values():
        name, st = str(spool.directory), spool.stats
        pending.add_metric([name], st.pending)
        size.add_metric([name], st.bytes)
        replayed.add_metric([name], st.replayed)
        for reason, n in (
            ("size", st.dropped_size),
            ("age", st.dropped_age),
            ("rejected", st.rejected),
        ):
            dropped.add_metric([name, reason], n)
    yield pending
    yield size
    yield replayed
    yield dropped


def render(service: RiskService) -> bytes:
    """The whole /metrics body: the exporter's telemetry (if collecting), then decisions."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DecisionCollector(service))  # type: ignore[arg-type]
    body = generate_latest(registry)
    if service.exporter is not None:
        return service.exporter.render() + body
    return body


__all__ = ["render"]

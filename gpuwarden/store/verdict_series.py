"""gpuwarden's verdicts as time series, for stores that keep series (InfluxDB, VictoriaMetrics).

Grafana and the weekly report show risk and state over time. ``serve`` exports them on
``/metrics``; a time-series store is also *written* the same series from each stored verdict,
under the same names and labels, so one Grafana panel reads either a Prometheus that scrapes
serve or a store that serve writes into:

    gpuwarden_risk_score{Hostname, gpu, UUID}              the verdict's risk (no point when
                                                          the risk is unknown: never 0)
    gpuwarden_gpu_state{Hostname, gpu, UUID, state}        1 for the verdict's state, 0 for
                                                          the other states
    gpuwarden_gpu_transition{Hostname, gpu, UUID, from, to, cause}
                                                          1 at each verdict that changed the
                                                          state (``Verdict.changed_from``)

A verdict is written on every change and at least hourly (``serve.verdicts``), so panels read
these with ``last_over_time(...[90m])``. SQLite keeps verdicts in its table only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from gpuwarden.health import GpuState, Verdict

RISK = "gpuwarden_risk_score"
STATE = "gpuwarden_gpu_state"
TRANSITION = "gpuwarden_gpu_transition"


class Point(NamedTuple):
    """One sample of one series: metric name, labels (sorted), value, Unix seconds."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    ts: float


def points(verdicts: Iterable[Verdict]) -> list[Point]:
    """The series samples of ``verdicts`` (see the module docstring)."""
    out = []
    for v in verdicts:
        ids = {"Hostname": v.gpu.hostname, "gpu": str(int(v.gpu.index)), "UUID": v.gpu.uuid}
        if math.isfinite(v.risk):
            out.append(Point(RISK, _labels(ids), float(v.risk), v.ts))
        for state in GpuState:
            value = 1.0 if v.state is state else 0.0
            out.append(Point(STATE, _labels({**ids, "state": str(state)}), value, v.ts))
        if v.changed_from is not None:
            turn = {**ids, "from": str(v.changed_from), "to": str(v.state), "cause": v.cause}
            out.append(Point(TRANSITION, _labels(turn), 1.0, v.ts))
    return out


def _labels(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


__all__ = ["Point", "RISK", "STATE", "TRANSITION", "points"]

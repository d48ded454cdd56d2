"""The circuit breaker: at most a share of the fleet newly tagged per window; ok always passes."""

import pytest

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth, TagResult
from gpuwarden.scheduler_hooks.breaker import CircuitBreaker


class RecordingTagger:
    """Tracks node states like an idempotent backend would."""

    name = "recording"
    dry_run = False

    def __init__(self, fail_on: str = "") -> None:
        self.states: dict[str, GpuState] = {}
        self.calls: list[str] = []
        self.fail_on = fail_on

    def apply(self, node: NodeHealth) -> TagResult:
        self.calls.append(node.hostname)
        if node.hostname == self.fail_on:
            raise HookError("backend down")
        if self.states.get(node.hostname, GpuState.OK) is node.state:
            return TagResult(False, "unchanged")
        self.states[node.hostname] = node.state
        return TagResult(True, f"{node.hostname} -> {node.state}")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def risky(host):
    return NodeHealth(host, {0: GpuState.AT_RISK})


def test_stops_a_mass_retag_and_reopens_after_the_window():
    inner, clock = RecordingTagger(), Clock()
    breaker = CircuitBreaker(inner, fleet_nodes=lambda: 40, window_s=600, clock=clock)
    assert breaker.limit() == 4
    results = [breaker.apply(risky(f"n{i}")) for i in range(40)]
    assert [r.changed for r in results[:4]] == [True] * 4
    blocked = results[4:]
    assert all(r.blocked and not r.changed for r in blocked)
    assert "circuit breaker open: 4 nodes already re-tagged by recording" in blocked[0].detail
    assert "the limit is 4 (10% of 40 nodes); n4 left as it is" in blocked[0].detail
    assert inner.calls == ["n0", "n1", "n2", "n3"]  # the backend never saw the rest
    assert breaker.trips == 36 and breaker.is_open()
    # a node already counted may be re-tagged (at-risk -> unhealthy), and ok always passes
    assert breaker.apply(NodeHealth("n1", {0: GpuState.UNHEALTHY})).changed
    assert breaker.apply(NodeHealth("n9", {0: GpuState.OK})).blocked is False
    clock.now += 600
    assert not breaker.is_open()
    assert breaker.apply(risky("n10")).changed


def test_unchanged_or_failed_nodes_cost_nothing():
    inner, clock = RecordingTagger(fail_on="bad"), Clock()
    inner.states["already"] = GpuState.AT_RISK
    breaker = CircuitBreaker(inner, fleet_nodes=lambda: 10, clock=clock)
    assert breaker.limit() == 1
    assert not breaker.apply(risky("already")).changed  # tagged before: not a new re-tag
    with pytest.raises(HookError):
        breaker.apply(risky("bad"))
    assert breaker.apply(risky("fresh")).changed
    assert breaker.apply(risky("second")).blocked


def test_small_fleets_may_tag_min_nodes():
    breaker = CircuitBreaker(RecordingTagger(), fleet_nodes=lambda: 3, min_nodes=1)
    assert breaker.limit() == 1
    breaker = CircuitBreaker(RecordingTagger(), fleet_nodes=lambda: 3, min_nodes=0)
    assert breaker.apply(risky("n1")).blocked


@pytest.mark.parametrize("kw", [dict(max_share=0), dict(max_share=1.5), dict(window_s=0)])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ConfigError):
        CircuitBreaker(RecordingTagger(), fleet_nodes=lambda: 1, **kw)

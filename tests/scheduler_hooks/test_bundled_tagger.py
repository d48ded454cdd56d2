"""The bundled-scheduler tagger against the real in-process ``gpuwarden.scheduler.Scheduler``."""

import pytest

from gpuwarden.errors import HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler_hooks.base import NodeHealth, Tagger
from gpuwarden.scheduler_hooks.bundled import BundledTagger, GpuHealthTarget, SchedulerTarget

OK, RISK, BAD = GpuState.OK, GpuState.AT_RISK, GpuState.UNHEALTHY


@pytest.fixture
def scheduler():
    return Scheduler(
        [NodeSpec.uniform(f"n{i}", 16000, 65536, 2, "H100-80GB") for i in (1, 2)],
        policy="bestfit",
    )


def test_at_risk_takes_only_interruptible_work(scheduler):
    target = SchedulerTarget(scheduler)
    assert isinstance(target, GpuHealthTarget)
    tagger = BundledTagger(target)
    assert isinstance(tagger, Tagger)
    r = tagger.apply(NodeHealth("n1", {0: RISK, 1: RISK}, "risk 0.82"))
    assert r.changed and r.detail == "n1 GPU 0: ok -> at-risk; n1 GPU 1: ok -> at-risk"
    assert target.gpu_health("n1", 0) == "at-risk"
    # a critical job needing 2 GPUs lands on n2; a second one has nowhere to go
    assert scheduler.place(Job("critical", gpus_per_task=2)).placed
    placement = scheduler.placements["critical"]
    assert {t.node for t in placement.tasks} == {"n2"}
    assert not scheduler.place(Job("critical-2", gpus_per_task=2)).placed
    assert scheduler.place(Job("batch", gpus_per_task=2, interruptible=True)).placed
    assert {t.node for t in scheduler.placements["batch"].tasks} == {"n1"}


def test_unhealthy_evicts_running_work_and_is_idempotent(scheduler):
    tagger = BundledTagger(SchedulerTarget(scheduler))
    scheduler.place(Job("train", gpus_per_task=2))
    node = next(t.node for t in scheduler.placements["train"].tasks)
    r = tagger.apply(NodeHealth(node, {0: BAD, 1: OK}, "Xid 79"))
    assert r.changed
    assert f"{node} GPU 0: ok -> unhealthy; job train told to checkpoint and leave" in r.detail
    assert "train" not in scheduler.placements
    again = tagger.apply(NodeHealth(node, {0: BAD, 1: OK}, "Xid 79"))
    assert not again.changed and again.detail == f"{node} already unhealthy"


def test_dry_run_prints_and_changes_nothing(scheduler):
    lines = []
    tagger = BundledTagger(SchedulerTarget(scheduler), dry_run=True, echo=lines.append)
    r = tagger.apply(NodeHealth("n2", {1: RISK}, "hot HBM"))
    assert r.changed and r.dry_run
    assert lines == ["[dry-run] bundled scheduler: set n2 GPU 1: ok -> at-risk (hot HBM)"]
    assert SchedulerTarget(scheduler).gpu_health("n2", 1) == "ok"


def test_unknown_node_or_gpu_is_a_hook_error(scheduler):
    tagger = BundledTagger(SchedulerTarget(scheduler))
    with pytest.raises(HookError, match="no node 'n9'"):
        tagger.apply(NodeHealth("n9", {0: RISK}))
    with pytest.raises(HookError, match="has no GPU 7"):
        tagger.apply(NodeHealth("n1", {7: RISK}))

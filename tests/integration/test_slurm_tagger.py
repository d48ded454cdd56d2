"""The Slurm tagger against a real slurmctld and three slurmd on 127.0.0.1.

A job asking for ``--constraint=gpuwarden_healthy`` never lands on an at-risk node, an
interruptible job (no constraint) does; an unhealthy node is drained with a reason and resumed
when it is ok again.
"""

from __future__ import annotations

import pytest
from slurm_cluster import FEATURE, SlurmCluster

from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth
from gpuwarden.scheduler_hooks.slurm import SlurmTagger

pytestmark = pytest.mark.integration


@pytest.fixture
def slurm(tmp_path):
    cluster = SlurmCluster(tmp_path)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_constraint_jobs_avoid_at_risk_nodes_and_unhealthy_nodes_drain(slurm):
    tagger = SlurmTagger(slurm_conf=str(slurm.conf))
    at_risk = NodeHealth("node1", {0: GpuState.AT_RISK, 1: GpuState.OK}, "risk 0.83")
    r = tagger.apply(at_risk)
    assert r.changed and "AvailableFeatures= ActiveFeatures=" in r.detail
    assert not tagger.apply(at_risk).changed  # idempotent: nothing left to do
    assert slurm.node("node1")["ActiveFeatures"] == ""
    unhealthy = NodeHealth("node3", {1: GpuState.UNHEALTHY}, "Xid 79 (GPU has fallen off the bus)")
    tagger.apply(unhealthy)
    node3 = slurm.node("node3")
    assert "DRAIN" in node3["State"].split("+")
    assert node3["Reason"].startswith("gpuwarden: GPU 1 unhealthy: Xid 79 (GPU has fallen off")
    assert FEATURE not in node3["ActiveFeatures"]
    assert not tagger.apply(unhealthy).changed

    job = ["--exclusive", *slurm.sleeper()]
    critical = slurm.sbatch(f"--constraint={FEATURE}", "-J", "critical", *job)
    assert slurm.wait_job(critical, {"RUNNING"})["NodeList"] == "node2"
    waiting = slurm.sbatch(f"--constraint={FEATURE}", "-J", "critical-2", *job)
    batch = slurm.sbatch("-J", "interruptible", *job)
    # the interruptible job starts on the at-risk node; the scheduler looked at the critical
    # one first (submitted earlier) and left it waiting rather than use node1
    assert slurm.wait_job(batch, {"RUNNING"})["NodeList"] == "node1"
    pending = slurm.job(waiting)
    assert pending["JobState"] == "PENDING" and pending["NodeList"] in ("", "(null)")

    # node3 back to ok: resumed with its feature, and the waiting critical job runs there
    r = tagger.apply(NodeHealth("node3", {1: GpuState.OK}, "GPU replaced"))
    assert "State=RESUME" in r.detail
    assert slurm.wait_job(waiting, {"RUNNING"})["NodeList"] == "node3"
    assert "DRAIN" not in slurm.node("node3")["State"]


def test_an_admin_drain_is_left_alone(slurm):
    slurm.scontrol("update", "NodeName=node2", "State=DRAIN", "Reason=bad fan, ticket 4711")
    tagger = SlurmTagger(slurm_conf=str(slurm.conf))
    tagger.apply(NodeHealth("node2", {0: GpuState.AT_RISK}))
    r = tagger.apply(NodeHealth("node2", {0: GpuState.OK}))
    assert "RESUME" not in r.detail
    node2 = slurm.node("node2")
    assert "DRAIN" in node2["State"] and node2["Reason"].startswith("bad fan, ticket 4711")
    assert FEATURE in node2["ActiveFeatures"].split(",")

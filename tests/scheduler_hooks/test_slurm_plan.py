"""The Slurm tagger's plan from `scontrol -o show node` output, with a recorded scontrol.

The real cluster is in tests/integration/test_slurm_tagger.py; here the lines are the ones
Slurm 22.05 printed on this project's test cluster.
"""

import pytest

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks import open_tagger
from gpuwarden.scheduler_hooks.base import NodeHealth
from gpuwarden.scheduler_hooks.slurm import SlurmTagger, parse_node, plan_updates

IDLE = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.56 "
    "AvailableFeatures=gpuwarden_healthy,ib ActiveFeatures=gpuwarden_healthy,ib Gres=gpu:2 "
    "NodeAddr=127.0.0.1 NodeHostName=localhost Port=49451 Version=22.05.8 "
    "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 State=IDLE ThreadsPerCore=1"
)
DRAINED_BY_US = (
    "NodeName=node1 AvailableFeatures=(null) ActiveFeatures= State=IDLE+DRAIN Weight=1 "
    "Reason=gpuwarden: GPU 1 unhealthy: Xid 79 (fell off) [root@2026-12-02T17:21:37]"
)
DRAINED_BY_ADMIN = (
    "NodeName=node1 AvailableFeatures=ib ActiveFeatures=ib State=MIXED+DRAIN "
    "Reason=bad fan, ticket 4711 [admin@2026-12-02T17:21:37]"
)


def test_parse_node_keeps_the_reason_whole():
    node = parse_node(DRAINED_BY_US)
    assert node["State"] == "IDLE+DRAIN" and node["AvailableFeatures"] == "(null)"
    assert (
        node["Reason"] == "gpuwarden: GPU 1 unhealthy: Xid 79 (fell off) [root@2026-12-02T17:21:37]"
    )
    assert parse_node(IDLE)["ActiveFeatures"] == "gpuwarden_healthy,ib"


def want(state, reason="Xid 79 (fell off)"):
    return NodeHealth("node1", {0: GpuState.OK, 1: state}, reason)


def test_plans():
    f = "gpuwarden_healthy"
    assert plan_updates(parse_node(IDLE), want(GpuState.OK), f) == []
    assert plan_updates(parse_node(IDLE), want(GpuState.AT_RISK), f) == [
        ["update", "NodeName=node1", "AvailableFeatures=ib", "ActiveFeatures=ib"]
    ]
    assert plan_updates(parse_node(IDLE), want(GpuState.UNHEALTHY), f) == [
        ["update", "NodeName=node1", "AvailableFeatures=ib", "ActiveFeatures=ib"],
        [
            "update",
            "NodeName=node1",
            "State=DRAIN",
            "Reason=gpuwarden: GPU 1 unhealthy: Xid 79 (fell off)",
        ],
    ]
    assert plan_updates(parse_node(DRAINED_BY_US), want(GpuState.UNHEALTHY), f) == []
    assert plan_updates(parse_node(DRAINED_BY_US), want(GpuState.OK), f) == [
        [
            "update",
            "NodeName=node1",
            "AvailableFeatures=gpuwarden_healthy",
            "ActiveFeatures=gpuwarden_healthy",
        ],
        ["update", "NodeName=node1", "State=RESUME"],
    ]
    # an admin's drain is the admin's to undo
    assert plan_updates(parse_node(DRAINED_BY_ADMIN), want(GpuState.OK), f) == [
        [
            "update",
            "NodeName=node1",
            "AvailableFeatures=ib,gpuwarden_healthy",
            "ActiveFeatures=ib,gpuwarden_healthy",
        ]
    ]


class FakeScontrol:
    def __init__(self, show: str) -> None:
        self.show = show
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[1:3] == ["-o", "show"]:
            return self.show + "\n"
        return ""


def test_dry_run_prints_the_commands_and_runs_none():
    fake, lines = FakeScontrol(IDLE), []
    tagger = SlurmTagger(dry_run=True, echo=lines.append, run=fake)
    r = tagger.apply(want(GpuState.UNHEALTHY))
    assert r.changed and r.dry_run
    assert lines == [
        "[dry-run] slurm: scontrol update NodeName=node1 AvailableFeatures=ib ActiveFeatures=ib",
        "[dry-run] slurm: scontrol update NodeName=node1 State=DRAIN "
        "'Reason=gpuwarden: GPU 1 unhealthy: Xid 79 (fell off)'",
    ]
    assert fake.calls == [["scontrol", "-o", "show", "node", "node1"]]


def test_not_a_node_and_bad_settings():
    with pytest.raises(HookError, match="no node named 'node1'"):
        SlurmTagger(run=lambda argv: "").apply(want(GpuState.AT_RISK))
    with pytest.raises(ConfigError, match="one plain word"):
        SlurmTagger(feature="a,b")
    with pytest.raises(ConfigError, match="unknown parameter"):
        open_tagger("slurm://?featur=x")
    missing = SlurmTagger(scontrol="/nonexistent/scontrol")
    with pytest.raises(HookError, match="not found: is Slurm installed"):
        missing.apply(want(GpuState.AT_RISK))
    t = open_tagger("slurm://?feature=healthy&conf=/etc/slurm/x.conf", dry_run=True)
    assert isinstance(t, SlurmTagger) and t.feature == "healthy" and t.dry_run

"""Model-cache-aware placement: among placements the policy ranks equal, a node whose cache
holds the job's weights; never at the cost of fragmentation. And what agents report."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler.modelcache import CacheWatcher, scan_cache
from gpuwarden.scheduler.policies.mix import TaskMix

LLAMA = "meta-llama/Llama-3.1-8B"


def _empty(policy: str, n: int = 4) -> Scheduler:
    nodes = [NodeSpec.uniform(f"n{i}", 64_000, 262_144, 8, "A100-80GB") for i in range(n)]
    return Scheduler(nodes, policy=policy)


@pytest.mark.parametrize("policy", ["warden", "fgd"])
def test_equal_nodes_go_to_the_one_with_the_weights(policy):
    plain = _empty(policy).place(Job("a", gpus_per_task=2)).placement.tasks[0].node
    s = _empty(policy)
    cached = next(n for n in s.cluster.names if n != plain)
    s.set_model_cache(cached, [LLAMA, "other"])
    assert s.cached_on(LLAMA) == [cached]
    assert s.place(Job("a", gpus_per_task=2, model=LLAMA)).placement.tasks[0].node == cached
    assert s.place(Job("b", gpus_per_task=2)).placement.tasks[0].node != "x"
    assert s.cluster.prefer is None  # the hint lives for one choice only


@pytest.mark.parametrize("policy", ["warden", "fgd"])
def test_fragmentation_comes_first(policy):
    mix = TaskMix()
    mix.observe(Job("eight", gpus_per_task=8), count=10)
    mix.observe(Job("four", gpus_per_task=4), count=10)
    nodes = [NodeSpec.uniform(f"n{i}", 64_000, 262_144, 8, "A100-80GB") for i in range(2)]
    s = Scheduler(nodes, policy=policy, mix=mix)
    s.place(Job("half", gpus_per_task=4))
    used = s.placements["half"].tasks[0].node
    idle = next(n for n in s.cluster.names if n != used)
    s.set_model_cache(idle, [LLAMA])
    # a 4-GPU job fills the half-used node exactly; on the idle one it would leave no node for
    # the mix's 8-GPU jobs: the cache does not win
    assert s.place(Job("b", gpus_per_task=4, model=LLAMA)).placement.tasks[0].node == used


def test_cache_reports_replace_and_forget():
    s = _empty("warden", 2)
    s.set_model_cache("n0", [LLAMA])
    s.set_model_cache("n0", ["x"])
    assert s.cached_on(LLAMA) == [] and s.cached_on("x") == ["n0"]
    with pytest.raises(InputError, match="no node"):
        s.set_model_cache("nope", [])
    with pytest.raises(InputError, match="model must be"):
        Job("j", model="")


def test_scan_cache_layouts(tmp_path):
    assert scan_cache(tmp_path / "absent") == []
    (tmp_path / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc").mkdir(parents=True)
    (tmp_path / "models--half--downloaded").mkdir()  # no snapshot yet: not usable
    (tmp_path / "mistral-7b").mkdir()
    (tmp_path / "mistral-7b" / "config.json").write_text("{}")
    (tmp_path / "org" / "model").mkdir(parents=True)
    (tmp_path / "org" / "model" / "config.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    assert scan_cache(tmp_path) == [LLAMA, "mistral-7b", "org/model"]
    w = CacheWatcher(tmp_path)
    assert w.poll() == [LLAMA, "mistral-7b", "org/model"]
    assert w.poll() is None
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "config.json").write_text("{}")
    assert w.poll() == [LLAMA, "mistral-7b", "new", "org/model"]
    w.forget()
    assert w.poll() is not None


def test_service_takes_cache_reports_and_model_specs(svc):
    from service_helpers import A, PlayAgent, submit

    PlayAgent(svc, "n1", gpus=2)
    PlayAgent(svc, "n2", gpus=2)
    svc.agent_sync("n2", {"tasks": [], "logs": [], "models": [LLAMA]})
    job = submit(svc, model=LLAMA, gpus_per_task=1)
    row = svc.db.job(job)
    assert row.spec["model"] == LLAMA and row.placement[0]["node"] == "n2"
    assert svc.job(A, job)["model"] == LLAMA
    with pytest.raises(InputError, match="model"):
        submit(svc, model=5)

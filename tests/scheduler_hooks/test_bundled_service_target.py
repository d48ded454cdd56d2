"""The bundled tagger driving a scheduler service in another thread over real HTTP
(``ServiceTarget``), as ``gpuwarden serve --tagger bundled+http://HOST:PORT`` does."""

from __future__ import annotations

import httpx
import pytest

from gpuwarden.errors import HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.service import Principal, SchedulerService
from gpuwarden.scheduler.state import SchedulerDB
from gpuwarden.scheduler_hooks import open_tagger
from gpuwarden.scheduler_hooks.base import NodeHealth
from gpuwarden.scheduler_hooks.bundled import BundledTagger, GpuHealthTarget, ServiceTarget

ADMIN, AGENT = "admin-token-1234", "agent-token-1234"


@pytest.fixture
def service(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    svc = SchedulerService(db)
    server = SchedulerServer(svc, TokenBook({"a": "tenant-token-a"}, admin=ADMIN, agent=AGENT))
    server.start(port=0)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB"} for i in range(2)]
    svc.register("n1", {"cpu_milli": 8000, "memory_mib": 65536, "gpus": gpus})
    yield svc, server.url
    server.stop()
    db.close()


def test_service_target_retags_and_evicts(service):
    svc, url = service
    job, _ = svc.submit(Principal("tenant", "a"), {"name": "serve", "command": "sleep 60"})
    svc.agent_sync("n1", {"tasks": [], "logs": []})
    target = ServiceTarget(url, ADMIN)
    assert isinstance(target, GpuHealthTarget)
    tagger = BundledTagger(target)
    gpu = job["placement"][0]["gpus"][0]  # placed by the round the submission ran
    result = tagger.apply(NodeHealth("n1", {gpu: GpuState.AT_RISK}, "risk 0.9"))
    assert result.changed
    assert f"job {job['job_id']} told to checkpoint and leave" in result.detail
    assert target.gpu_health("n1", gpu) == "at-risk"
    assert svc.job(Principal("admin"), job["job_id"])["state"] == "checkpointing"
    again = tagger.apply(NodeHealth("n1", {gpu: GpuState.AT_RISK}, "risk 0.9"))
    assert not again.changed  # idempotent: the service already shows it


def test_service_target_errors_are_hook_errors(service, monkeypatch):
    _, url = service
    with pytest.raises(HookError, match="not registered"):
        ServiceTarget(url, ADMIN).gpu_health("n9", 0)
    with pytest.raises(HookError, match="no GPU 7"):
        ServiceTarget(url, ADMIN).gpu_health("n1", 7)
    with pytest.raises(HookError, match="HTTP 401"):
        ServiceTarget(url, "wrong-token").gpu_health("n1", 0)
    with pytest.raises(HookError, match="bundled scheduler at http://127.0.0.1:9"):
        ServiceTarget("http://127.0.0.1:9", ADMIN, timeout_s=2).gpu_health("n1", 0)
    monkeypatch.setenv("GPUWARDEN_SCHEDULER_ADMIN_TOKEN", ADMIN)
    tagger = open_tagger(f"bundled+{url}", dry_run=True)
    result = tagger.apply(NodeHealth("n1", {1: GpuState.UNHEALTHY}, "Xid 79"))
    assert result.dry_run and result.changed
    admin = {"Authorization": f"Bearer {ADMIN}"}
    nodes = httpx.get(f"{url}/v1/nodes", headers=admin).json()
    assert nodes[0]["gpus"][1]["health"] == "ok"  # dry run changed nothing

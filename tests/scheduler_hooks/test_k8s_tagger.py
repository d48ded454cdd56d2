"""The Kubernetes tagger against a local server answering the API calls: exact PATCH bodies."""

import pytest
from fake_k8s import FakeKubernetes, node

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks import open_tagger
from gpuwarden.scheduler_hooks.base import NodeHealth
from gpuwarden.scheduler_hooks.k8s import AT_RISK_TAINT, UNHEALTHY_TAINT, KubernetesTagger

OK, RISK, BAD = GpuState.OK, GpuState.AT_RISK, GpuState.UNHEALTHY
ADMIN_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
MERGE = "application/merge-patch+json"


@pytest.fixture
def k8s():
    fake = FakeKubernetes(
        [
            node("gpu-1", taints=[ADMIN_TAINT]),
            node("gpu-2", unschedulable=True),  # cordoned by an admin
        ]
    )
    yield fake
    fake.close()


def health(host, **gpus):
    return NodeHealth(host, {int(k[1:]): v for k, v in gpus.items()}, "SBE rate rising")


def test_at_risk_unhealthy_ok_patch_bodies(k8s):
    tagger = KubernetesTagger(k8s.api())
    r = tagger.apply(health("gpu-1", g0=OK, g1=RISK, g3=RISK))
    assert r.changed and not r.dry_run
    assert k8s.patches[-1] == (
        "gpu-1",
        MERGE,
        {
            "metadata": {
                "labels": {"gpuwarden.io/health": "at-risk"},
                "annotations": {"gpuwarden.io/at-risk-gpus": "1,3"},
                "resourceVersion": "1",
            },
            "spec": {"taints": [ADMIN_TAINT, AT_RISK_TAINT]},
        },
    )
    r = tagger.apply(health("gpu-1", g0=OK, g1=RISK, g3=BAD))
    assert k8s.patches[-1][2] == {
        "metadata": {
            "labels": {"gpuwarden.io/health": "unhealthy"},
            "annotations": {
                "gpuwarden.io/at-risk-gpus": "1",
                "gpuwarden.io/unhealthy-gpus": "3",
                "gpuwarden.io/cordoned": "true",
            },
            "resourceVersion": "2",
        },
        "spec": {"unschedulable": True, "taints": [ADMIN_TAINT, UNHEALTHY_TAINT]},
    }
    r = tagger.apply(health("gpu-1", g0=OK, g1=OK, g3=OK))
    assert k8s.patches[-1][2] == {
        "metadata": {
            "labels": {"gpuwarden.io/health": None},
            "annotations": {
                "gpuwarden.io/at-risk-gpus": None,
                "gpuwarden.io/unhealthy-gpus": None,
                "gpuwarden.io/cordoned": None,
            },
            "resourceVersion": "3",
        },
        "spec": {"unschedulable": False, "taints": [ADMIN_TAINT]},
    }
    final = k8s.nodes["gpu-1"]
    assert final["spec"] == {"taints": [ADMIN_TAINT], "unschedulable": False}
    assert final["metadata"]["labels"] == {"kubernetes.io/hostname": "gpu-1"}
    assert final["metadata"]["annotations"] == {}
    assert k8s.auth == {"Bearer t0k"}


def test_same_health_twice_patches_once(k8s):
    tagger = KubernetesTagger(k8s.api())
    want = health("gpu-1", g2=RISK)
    assert tagger.apply(want).changed
    again = tagger.apply(want)
    assert not again.changed and "already at-risk" in again.detail
    assert len(k8s.patches) == 1


def test_an_admin_cordon_survives_ok(k8s):
    tagger = KubernetesTagger(k8s.api())
    tagger.apply(health("gpu-2", g0=BAD))
    body = k8s.patches[-1][2]
    assert "unschedulable" not in body["spec"]  # already cordoned: not ours to undo later
    assert "gpuwarden.io/cordoned" not in body["metadata"]["annotations"]
    tagger.apply(health("gpu-2", g0=OK))
    assert k8s.nodes["gpu-2"]["spec"]["unschedulable"] is True


def test_a_concurrent_edit_is_retried_on_a_fresh_read(k8s):
    k8s.edit_before_next_patch = True
    tagger = KubernetesTagger(k8s.api())
    assert tagger.apply(health("gpu-1", g0=RISK)).changed
    assert [p[2]["metadata"]["resourceVersion"] for p in k8s.patches] == ["1", "2"]
    labels = k8s.nodes["gpu-1"]["metadata"]["labels"]
    assert labels["someone-else"] == "was-here" and labels["gpuwarden.io/health"] == "at-risk"


def test_dry_run_prints_and_sends_nothing(k8s):
    lines = []
    tagger = KubernetesTagger(k8s.api(), dry_run=True, echo=lines.append)
    r = tagger.apply(health("gpu-1", g0=RISK))
    assert r.changed and r.dry_run and k8s.patches == []
    [line] = lines
    assert line.startswith("[dry-run] kubernetes: PATCH /api/v1/nodes/gpu-1 {")
    assert '"gpuwarden.io/health": "at-risk"' in line


def test_backend_failures_are_hook_errors(k8s):
    with pytest.raises(HookError, match="no node named 'gpu-9'"):
        KubernetesTagger(k8s.api()).apply(health("gpu-9", g0=RISK))
    dead = KubernetesTagger(FakeKubernetesDown().api(), timeout_s=2)
    with pytest.raises(HookError, match="read node gpu-1 failed"):
        dead.apply(health("gpu-1", g0=RISK))


class FakeKubernetesDown:
    def api(self):
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = "http://127.0.0.1:1"  # nothing listens on port 1
        cfg.retries = 0
        return client.CoreV1Api(client.ApiClient(cfg))


def test_open_tagger_reads_a_kubeconfig(k8s, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: test, cluster: {{server: "{k8s.url}"}}}}]
users: [{{name: u, user: {{token: from-kubeconfig}}}}]
contexts: [{{name: test, context: {{cluster: test, user: u}}}}]
current-context: test
"""
    )
    tagger = open_tagger(f"k8s://?kubeconfig={kubeconfig}")
    assert isinstance(tagger, KubernetesTagger)
    tagger.apply(health("gpu-1", g0=RISK))
    assert "Bearer from-kubeconfig" in k8s.auth
    with pytest.raises(ConfigError, match="unknown parameter"):
        open_tagger("k8s://?kubecfg=x")
    with pytest.raises(ConfigError, match="cannot load"):
        open_tagger(f"k8s://?kubeconfig={tmp_path / 'missing'}")

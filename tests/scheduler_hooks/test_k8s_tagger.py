"""The Kubernetes tagger against a local server answering the API calls: exact PATCH bodies."""

import pytest
from fake_k8s import FakeKubernetes, node

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks import open_tagger
from gpuwarden.scheduler_hooks._k8s_dra import DeviceTaints
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
    want = health("gpu-1", g0=OK, g1=RISK, g3=RISK)
    r = tagger.apply(NodeHealth(want.hostname, want.gpus, want.reason, {1: "GPU-aa", 3: "GPU-bb"}))
    assert r.changed and not r.dry_run
    assert k8s.patches[-1] == (
        "gpu-1",
        MERGE,
        {
            "metadata": {
                "labels": {
                    "gpuwarden.io/health": "at-risk",
                    "gpuwarden.io/at-risk-gpu-count": "2",
                },
                "annotations": {
                    "gpuwarden.io/at-risk-gpus": '[{"index":1,"uuid":"GPU-aa"},'
                    '{"index":3,"uuid":"GPU-bb"}]'
                },
                "resourceVersion": "1",
            },
            "spec": {"taints": [ADMIN_TAINT, AT_RISK_TAINT]},
        },
    )
    r = tagger.apply(health("gpu-1", g0=OK, g1=RISK, g3=BAD))
    assert k8s.patches[-1][2] == {
        "metadata": {
            "labels": {
                "gpuwarden.io/health": "unhealthy",
                "gpuwarden.io/at-risk-gpu-count": "1",
                "gpuwarden.io/unhealthy-gpu-count": "1",
            },
            "annotations": {
                "gpuwarden.io/at-risk-gpus": '[{"index":1}]',
                "gpuwarden.io/unhealthy-gpus": '[{"index":3}]',
                "gpuwarden.io/cordoned": "true",
            },
            "resourceVersion": "2",
        },
        "spec": {"unschedulable": True, "taints": [ADMIN_TAINT, UNHEALTHY_TAINT]},
    }
    r = tagger.apply(health("gpu-1", g0=OK, g1=OK, g3=OK))
    assert k8s.patches[-1][2] == {
        "metadata": {
            "labels": {
                "gpuwarden.io/health": None,
                "gpuwarden.io/at-risk-gpu-count": None,
                "gpuwarden.io/unhealthy-gpu-count": None,
            },
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
    assert [r[0] for r in k8s.requests] == ["GET", "GET", "PATCH", "GET", "PATCH"]  # list, read
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
    with pytest.raises(HookError, match="no node has label kubernetes.io/hostname=gpu-9"):
        KubernetesTagger(k8s.api()).apply(health("gpu-9", g0=RISK))
    with pytest.raises(HookError, match="no node named 'gpu-9'"):
        KubernetesTagger(k8s.api(), node_label="").apply(health("gpu-9", g0=RISK))
    dead = KubernetesTagger(FakeKubernetesDown().api(), timeout_s=2, node_label="")
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
    kubeconfig = k8s.kubeconfig(tmp_path / "config", "from-kubeconfig")
    tagger = open_tagger(f"k8s://?kubeconfig={kubeconfig}")
    assert isinstance(tagger, KubernetesTagger)
    tagger.apply(health("gpu-1", g0=RISK))
    assert "Bearer from-kubeconfig" in k8s.auth
    with pytest.raises(ConfigError, match="unknown parameter"):
        open_tagger("k8s://?kubecfg=x")
    with pytest.raises(ConfigError, match="cannot load"):
        open_tagger(f"k8s://?kubeconfig={tmp_path / 'missing'}")


def test_host_names_map_to_node_names_through_the_hostname_label():
    fake = FakeKubernetes(
        [
            node("ip-10-0-0-7.ec2.internal", labels={"kubernetes.io/hostname": "gpu-7"}),
            node("gpu-8", labels={"kubernetes.io/hostname": "gpu-8", "site/host": "rack3-08"}),
        ]
    )
    try:
        tagger = KubernetesTagger(fake.api())
        tagger.apply(health("gpu-7", g2=RISK))
        assert fake.patches[-1][0] == "ip-10-0-0-7.ec2.internal"
        assert ("GET", "/api/v1/nodes?labelSelector=kubernetes.io/hostname%3Dgpu-7") in (
            fake.requests
        )
        lists = sum(1 for m, p in fake.requests if m == "GET" and "labelSelector" in p)
        tagger.apply(health("gpu-7", g2=OK))
        assert sum(1 for m, p in fake.requests if "labelSelector" in p) == lists  # remembered
        other = KubernetesTagger(fake.api(), node_label="site/host")
        other.apply(health("rack3-08", g0=RISK))
        assert fake.patches[-1][0] == "gpu-8"
    finally:
        fake.close()


def test_two_nodes_claiming_one_host_name_are_refused():
    fake = FakeKubernetes(
        [
            node("a", labels={"kubernetes.io/hostname": "h"}),
            node("b", labels={"kubernetes.io/hostname": "h"}),
        ]
    )
    try:
        with pytest.raises(HookError, match="nodes a, b all have label kubernetes.io/hostname=h"):
            KubernetesTagger(fake.api()).apply(health("h", g0=RISK))
        assert fake.patches == []
    finally:
        fake.close()


def test_extender_mode_publishes_gpus_and_leaves_the_node_schedulable(k8s):
    tagger = KubernetesTagger(k8s.api(), at_risk="extender")
    tagger.apply(health("gpu-1", g0=OK, g5=RISK))
    assert k8s.patches[-1][2] == {
        "metadata": {
            "labels": {"gpuwarden.io/health": "at-risk", "gpuwarden.io/at-risk-gpu-count": "1"},
            "annotations": {"gpuwarden.io/at-risk-gpus": '[{"index":5}]'},
            "resourceVersion": "1",
        }
    }
    assert k8s.nodes["gpu-1"]["spec"]["taints"] == [ADMIN_TAINT]
    # a node tainted by the node-taint mode loses that taint when the mode changes
    KubernetesTagger(k8s.api()).apply(health("gpu-1", g5=RISK, g6=RISK))
    assert AT_RISK_TAINT in k8s.nodes["gpu-1"]["spec"]["taints"]
    tagger.apply(health("gpu-1", g5=RISK, g6=RISK))
    assert k8s.patches[-1][2]["spec"] == {"taints": [ADMIN_TAINT]}
    with pytest.raises(ConfigError, match="choose one of taint, extender, dra"):
        KubernetesTagger(k8s.api(), at_risk="cordon")


def test_dra_mode_writes_one_device_taint_rule_per_at_risk_gpu(k8s):
    dra = DeviceTaints(k8s.api_client())
    tagger = KubernetesTagger(k8s.api(), at_risk="dra", dra=dra)
    tagger.apply(health("gpu-1", g0=OK, g2=RISK, g3=RISK))
    rules = k8s.objects("DeviceTaintRule")
    assert sorted(rules) == ["gpuwarden-gpu-1-gpu-2", "gpuwarden-gpu-1-gpu-3"]
    rule = rules["gpuwarden-gpu-1-gpu-3"]
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-3"},
        "taint": {"key": "gpuwarden.io/at-risk", "value": "true", "effect": "NoSchedule"},
    }
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuwarden"}
    assert k8s.nodes["gpu-1"]["spec"]["taints"] == [ADMIN_TAINT]  # no node taint
    posts = [r for r in k8s.requests if r[0] == "POST"]
    assert len(posts) == 2
    # the same picture again: nothing written; GPU 2 recovers: its rule alone is deleted
    assert not tagger.apply(health("gpu-1", g0=OK, g2=RISK, g3=RISK)).changed
    assert len([r for r in k8s.requests if r[0] == "POST"]) == 2
    tagger.apply(health("gpu-1", g0=OK, g2=OK, g3=RISK))
    assert sorted(k8s.objects("DeviceTaintRule")) == ["gpuwarden-gpu-1-gpu-3"]
    assert ("DELETE", "/apis/resource.k8s.io/v1alpha3/devicetaintrules/gpuwarden-gpu-1-gpu-2") in (
        k8s.requests
    )
    lines = []
    dry = KubernetesTagger(k8s.api(), at_risk="dra", dra=dra, dry_run=True, echo=lines.append)
    dry.apply(health("gpu-1", g3=OK))
    assert lines[-1] == (
        "[dry-run] kubernetes: DELETE /apis/resource.k8s.io/v1alpha3/devicetaintrules/"
        "gpuwarden-gpu-1-gpu-3"
    )
    assert "gpuwarden-gpu-1-gpu-3" in k8s.objects("DeviceTaintRule")


def test_open_tagger_takes_the_mode_and_node_label(k8s, tmp_path):
    kubeconfig = k8s.kubeconfig(tmp_path / "config", "t")
    tagger = open_tagger(f"k8s://?kubeconfig={kubeconfig}&mode=dra&node-label=")
    assert tagger.at_risk == "dra" and tagger.names.label == ""
    assert tagger.dra.path == "/apis/resource.k8s.io/v1alpha3/devicetaintrules"
    tagger.apply(health("gpu-1", g4=RISK))  # node name = host name, one rule for GPU 4
    assert list(k8s.objects("DeviceTaintRule")) == ["gpuwarden-gpu-1-gpu-4"]
    assert open_tagger(f"k8s://?kubeconfig={kubeconfig}").at_risk == "taint"
    with pytest.raises(ConfigError, match="mode='cordon': choose one of"):
        open_tagger(f"k8s://?kubeconfig={kubeconfig}&mode=cordon")
    with pytest.raises(ConfigError, match="dra-api='v1': want GROUP/VERSION"):
        open_tagger(f"k8s://?kubeconfig={kubeconfig}&mode=dra&dra-api=v1")

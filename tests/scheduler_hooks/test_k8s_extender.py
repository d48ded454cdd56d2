"""The scheduler extender over real HTTP (uvicorn), its picture listed from the local API server."""

import json

import httpx
import pytest
from fake_k8s import FakeKubernetes, node

from gpuwarden.lifecycle import AppServer
from gpuwarden.scheduler import TaskMix
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies import WardenPolicy
from gpuwarden.scheduler_hooks.k8s_extender import Extender, KubeSource, make_app

GPU8 = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
RISKY = {"gpuwarden.io/at-risk-gpus": '[{"index":3,"uuid":"GPU-3f2a"}]'}


def pod(name, *, gpus=1, node_name=None, tolerate=False, labels=None, claims=None, cpu="4"):
    req = {"cpu": cpu, "memory": "16Gi"}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec = {"containers": [{"name": "c", "resources": {"requests": req, "limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    if tolerate:
        spec["tolerations"] = [
            {"key": "gpuwarden.io/at-risk", "operator": "Exists", "effect": "NoSchedule"}
        ]
    if claims:
        spec["resourceClaims"] = claims
    meta = {"name": name, "namespace": "team-a", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}  # fmt: skip


@pytest.fixture
def cluster():
    nodes = [
        node("n-risky", annotations=dict(RISKY), allocatable=GPU8),
        node("n-busy", allocatable=GPU8),
        node("n-empty", allocatable=GPU8),
        node("n-full-risky", annotations=dict(RISKY), allocatable=GPU8),
    ]
    bound = [pod(f"p{i}", node_name="n-busy") for i in range(7)]
    bound += [pod("big", gpus=8, node_name="n-full-risky")]
    bound += [pod("done", gpus=8, node_name="n-empty") | {"status": {"phase": "Succeeded"}}]
    fake = FakeKubernetes(nodes, bound)
    mix = TaskMix.from_jobs([Job("a", gpus_per_task=8), Job("b", gpus_per_task=1)])
    ext = Extender(policy=WardenPolicy(mix))
    source = KubeSource(fake.api(), ext.set_view, resync_s=3600)
    source.sync()
    server = AppServer(make_app(ext, max_body_bytes=1 << 20), source).start(loop=False)
    client = httpx.Client(base_url=server.url, timeout=10)
    yield fake, ext, client
    client.close()
    server.stop()
    fake.close()


NAMES = ["n-risky", "n-busy", "n-empty", "n-full-risky"]


def post(client, verb, p, names=NAMES):
    r = client.post(f"/{verb}", json={"Pod": p, "NodeNames": names})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_critical_pod_loses_nodes_with_an_idle_at_risk_gpu(cluster):
    fake, ext, client = cluster
    # the list of bound pods left out the finished one: n-empty is empty
    assert ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded"
            "%2Cstatus.phase%21%3DFailed") in fake.requests  # fmt: skip
    out = post(client, "filter", pod("crit"))
    assert out["NodeNames"] == ["n-busy", "n-empty", "n-full-risky"]  # full: no GPU to hand out
    assert out["FailedNodes"] == {} and out["Error"] == ""
    assert out["FailedAndUnresolvableNodes"] == {
        "n-risky": "gpuwarden: GPU 3 (GPU-3f2a) at risk and the kubelet may hand it to this pod; "
        "interruptible pods tolerate gpuwarden.io/at-risk"
    }


@pytest.mark.parametrize(
    "p",
    [
        pod("tolerates", tolerate=True),
        pod("labelled", labels={"gpuwarden.io/interruptible": "true"}),
        pod("dra", gpus=0, claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
        pod("cpu-only", gpus=0),
    ],
    ids=["toleration", "label", "dra-claim", "cpu-only"],
)
def test_interruptible_dra_and_cpu_pods_keep_every_node(cluster, p):
    out = post(cluster[2], "filter", p)
    assert out["NodeNames"] == NAMES and out["FailedAndUnresolvableNodes"] == {}


def test_full_node_objects_and_their_annotations_win_over_the_picture(cluster):
    fake, ext, client = cluster
    items = [dict(fake.nodes[n]) for n in ("n-risky", "n-empty")]
    items[0] = json.loads(json.dumps(items[0]))
    items[0]["metadata"]["annotations"] = {}  # the GPU recovered since the last resync
    items[1] = json.loads(json.dumps(items[1]))
    items[1]["metadata"]["annotations"] = dict(RISKY)
    # lower-case keys, as Go's decoder also accepts
    r = client.post(
        "/filter", json={"pod": pod("crit"), "nodes": {"kind": "NodeList", "items": items}}
    )
    out = r.json()
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["n-risky"]
    assert out["Nodes"]["kind"] == "NodeList" and list(out["FailedAndUnresolvableNodes"]) == [
        "n-empty"
    ]


def test_prioritize_packs_where_warden_would(cluster):
    out = post(cluster[2], "prioritize", pod("one-gpu"))
    scores = {h["Host"]: h["Score"] for h in out}
    # n-busy has one idle GPU: taking it keeps n-empty whole for 8-GPU pods
    assert scores["n-busy"] == 10
    assert scores["n-empty"] < 10
    assert scores["n-full-risky"] == 0  # no room at all
    assert list(scores) == NAMES
    # an 8-GPU pod fits only on the empty node; an unknown node scores 0
    out = post(cluster[2], "prioritize", pod("eight", gpus=8), names=["n-busy", "n-empty", "new"])
    assert out == [
        {"Host": "n-busy", "Score": 0},
        {"Host": "n-empty", "Score": 10},
        {"Host": "new", "Score": 0},
    ]


def test_bad_input_is_a_400_and_the_extender_keeps_serving(cluster):
    fake, ext, client = cluster
    r = client.post("/filter", content=b'{"Pod": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "Error" in r.json()
    r = client.post("/filter", json={"NodeNames": ["a"]})
    assert r.status_code == 400 and r.json() == {"Error": "ExtenderArgs has no Pod"}
    r = client.post("/prioritize", json={"Pod": pod("x"), "NodeNames": "n-busy"})
    assert r.status_code == 400 and "NodeNames" in r.json()["Error"]
    bad = pod("x")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    r = client.post("/filter", json={"Pod": bad, "NodeNames": NAMES})
    assert r.status_code == 400 and r.json() == {"Error": "not a Kubernetes quantity: 'lots'"}
    r = client.post("/filter", content=b"[" * 100 + b"]" * 100)
    assert r.status_code == 400 and "deep" in r.text
    r = client.post("/filter", content=b"x" * (2 << 20))
    assert r.status_code == 413
    assert ext.calls["refused"] == 4
    assert client.get("/filter").status_code == 405
    assert client.post("/bind", json={}).status_code == 404  # no bind verb: the kubelet picks
    assert post(client, "filter", pod("crit"))["NodeNames"] == NAMES[1:]
    assert client.get("/healthz").json()["nodes"] == 4


def test_the_extender_command_serves_what_the_api_server_lists(tmp_path):
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    fake = FakeKubernetes([node("n1", annotations=dict(RISKY), allocatable=GPU8),
                           node("n2", allocatable=GPU8)])  # fmt: skip
    kubeconfig = fake.kubeconfig(tmp_path / "config", "extender-token")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gpuwarden = Path(sys.executable).with_name("gpuwarden")
    argv = [str(gpuwarden), "k8s", "extender", "--listen", f"127.0.0.1:{port}",
            "--kubeconfig", str(kubeconfig), "--resync", "0.2"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        out = httpx.post(f"{url}/filter", json={"Pod": pod("c"), "NodeNames": ["n1", "n2"]}).json()
        assert out["NodeNames"] == ["n2"]
        # the GPU recovers: the next resync lets critical pods back on n1
        fake.nodes["n1"]["metadata"]["annotations"] = {}
        for _ in range(100):
            out = httpx.post(f"{url}/filter", json={"Pod": pod("c"), "NodeNames": ["n1", "n2"]})
            if out.json()["NodeNames"] == ["n1", "n2"]:
                break
            time.sleep(0.1)
        assert out.json()["NodeNames"] == ["n1", "n2"]
        assert fake.auth == {"Bearer extender-token"}
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        fake.close()
    assert "gpuwarden extender: http://127.0.0.1" in err and "2 nodes" in err
    bad = subprocess.run([str(gpuwarden), "k8s", "extender", "--kubeconfig", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 1 and "cannot load Kubernetes credentials" in bad.stderr
    assert f"from {tmp_path / 'none'}" in bad.stderr and "--kubeconfig" in bad.stderr

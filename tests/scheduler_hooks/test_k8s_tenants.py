"""``gpuwarden tenants apply``: rendered from the scheduler's tenant file, checked against the
Kubernetes OpenAPI schemas, and applied server-side to the local API server."""

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from fake_k8s import FakeKubernetes

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError, HookError
from gpuwarden.scheduler.quota import load_quotas
from gpuwarden.scheduler_hooks import k8s_tenants

K8S_VERSION = "1.32.0"  # the oldest release docs/kubernetes.md supports

TENANTS = """
[quotas.team-a]
gpus = 16
guaranteed_gpus = 8

[quotas.team-b]
gpus = 4.5
gpu_memory_mib = 327680

[kubernetes]
storage_class = "fast-rwx"
storage_size = "2Ti"
[kubernetes.mig.team-b]
"1g.10gb" = 14
"3g.40gb" = 2
"""


@pytest.fixture
def tenant_file(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS)
    return path


def test_the_bundled_scheduler_reads_the_same_file(tenant_file):
    assert load_quotas(str(tenant_file)) == {
        "team-a": {"gpus": 16, "guaranteed_gpus": 8},
        "team-b": {"gpus": 4.5, "gpu_memory_mib": 327680},
    }


def test_dry_run_prints_valid_yaml_for_every_object(tenant_file):
    result = CliRunner().invoke(main, ["tenants", "apply", "--file", str(tenant_file), "--dry-run"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    kinds = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert kinds == [
        ("PriorityClass", None, "gpuwarden-inference"),
        ("PriorityClass", None, "gpuwarden-training"),
        ("PriorityClass", None, "gpuwarden-batch"),
        ("PriorityClass", None, "gpuwarden-dev"),
        *[
            (kind, None if kind == "Namespace" else t, name)
            for t in ("team-a", "team-b")
            for kind, name in [
                ("Namespace", t),
                ("ResourceQuota", "gpuwarden-gpus"),
                ("LimitRange", "gpuwarden-limits"),
                ("NetworkPolicy", "gpuwarden-tenant-isolation"),
                ("PersistentVolumeClaim", "tenant-data"),
            ]
        ],
    ]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    quota_b = docs[10]["spec"]["hard"]
    assert quota_b == {
        "requests.nvidia.com/gpu": "4",
        "requests.nvidia.com/mig-1g.10gb": "14",
        "requests.nvidia.com/mig-3g.40gb": "2",
    }
    assert docs[11]["spec"]["limits"][0]["max"] == {"nvidia.com/gpu": "4"}
    assert docs[12]["spec"] == {
        "podSelector": {},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    }
    assert docs[13]["spec"]["storageClassName"] == "fast-rwx"


def test_apply_is_server_side_and_idempotent(tenant_file):
    fake = FakeKubernetes()
    try:
        objects = k8s_tenants.render(str(tenant_file))
        lines = []
        assert k8s_tenants.apply(objects, fake.api_client(), echo=lines.append) == 14
        assert lines[4] == "namespace/team-a applied"
        assert lines[5] == "resourcequota/gpuwarden-gpus -n team-a applied"
        patches = [r for r in fake.requests if r[0] == "PATCH"]
        assert len(patches) == 14
        assert all("fieldManager=gpuwarden" in p and "force=true" in p for _, p in patches)
        assert {c for _, c, _ in fake.patches} == {"application/apply-patch+yaml"}
        assert fake.objects("ResourceQuota", "team-a")["gpuwarden-gpus"]["spec"] == {
            "hard": {"requests.nvidia.com/gpu": "16"}
        }
        assert sorted(fake.objects("PriorityClass")) == [
            "gpuwarden-batch", "gpuwarden-dev", "gpuwarden-inference", "gpuwarden-training"
        ]  # fmt: skip
        ns = fake.objects("Namespace")["team-b"]["metadata"]["labels"]
        assert ns["gpuwarden.io/tenant"] == "team-b"
        before = {k: dict(v) for k, v in fake.store.items()}
        k8s_tenants.apply(objects, fake.api_client(), echo=lines.append)
        assert {k: set(v) for k, v in fake.store.items()} == {k: set(v) for k, v in before.items()}
    finally:
        fake.close()


def test_a_refused_object_is_one_clear_error(tenant_file):
    fake = FakeKubernetes()
    try:
        objects = k8s_tenants.render(str(tenant_file))
        objects[5]["metadata"]["namespace"] = "nowhere"  # a namespace that does not exist
        with pytest.raises(
            HookError,
            match='apply ResourceQuota nowhere/gpuwarden-gpus failed: 404 namespaces "nowhere"',
        ):
            k8s_tenants.apply(objects, fake.api_client(), echo=lambda line: None)
    finally:
        fake.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[quotas.Team_A]\ngpus = 1\n", "namespace 'Team_A' is not a DNS label"),
        ("[quotas.a]\ngpus = -1\n", "gpus must be a number >= 0"),
        ("[quotas.a]\ncpus = 1\n", "takes gpus, guaranteed_gpus, gpu_memory_mib"),
        ("[quotas.a]\n[kubernetes.mig.a]\n'2g.99gb' = 1\n", "no MIG resource for '2g.99gb'"),
        ("[quotas.a]\n[kubernetes]\nzone = 1\n", "[kubernetes] does not take zone"),
        ("[kubernetes]\n", "names no tenant"),
        ("[quotas.a\n", "tenant file"),
    ],
)
def test_a_bad_tenant_file_is_named(tmp_path, text, message):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        k8s_tenants.render(str(path))
    result = CliRunner().invoke(main, ["tenants", "apply", "--file", str(path), "--dry-run"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1

"""The Kubernetes manifests: rendered by kustomize (``kubectl kustomize``), every object checked
against the Kubernetes OpenAPI schemas (kubernetes-validate, offline), the ServiceMonitor and
PrometheusRule against prometheus-operator's CRD schemas (tests/data/prometheus-operator), and
the PrometheusRule's rules by promtool. No cluster is involved: this is what ``kubectl apply
--dry-run=server`` would check of the schemas, not what a cluster would do with the objects."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
CRDS = ROOT / "tests" / "data" / "prometheus-operator"
K8S_VERSIONS = ("1.32.0", "1.35.0")  # the oldest release docs/kubernetes.md supports, a recent one
TARGETS = ["base", "overlays/monitoring", "overlays/extender", "overlays/production"]
CRD_SCHEMAS = {
    "ServiceMonitor": "servicemonitors.schema.json",
    "PrometheusRule": "prometheusrules.schema.json",
}
IMAGE = "ghcr.io/gpuwarden/gpuwarden:0.1.0"


_spec = importlib.util.spec_from_file_location(
    "integration_daemons", ROOT / "tests" / "integration" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_daemons = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("integration_daemons", _daemons)
_spec.loader.exec_module(_daemons)
#: the binary's path; skips the test, or fails it under CI=true, when it is missing
need = _daemons.require_binary


def render(target: str) -> list[dict]:
    done = subprocess.run(
        [need("kubectl"), "kustomize", str(DEPLOY / target)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def validate(obj: dict) -> None:
    schema_file = CRD_SCHEMAS.get(obj["kind"])
    if schema_file is None:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        return
    schema = json.loads((CRDS / schema_file).read_text())
    assert obj["apiVersion"] == f"{schema['group']}/{schema['version']}"
    # the CRD's OpenAPI v3 schema read as JSON Schema draft 7; not meta-checked, since its Go
    # RE2 patterns ("(?i)" mid-pattern) are not Python regexes (none of them applies to ours)
    jsonschema.Draft7Validator(schema["schema"]).validate(obj)


def files() -> list[Path]:
    """Every manifest file kustomize reads (not the kustomizations themselves)."""
    return sorted(
        p
        for p in DEPLOY.rglob("*.yaml")
        if p.name != "kustomization.yaml" and "scheduler" not in p.parts
    )


@pytest.mark.parametrize("path", files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_file_is_valid_on_its_own(path):
    """Without kustomize: each object as written (patches are partial, checked rendered)."""
    for obj in yaml.safe_load_all(path.read_text()):
        if obj and "patches" not in path.parts and path.name != "serve-resources.yaml":
            validate(obj)


@pytest.mark.parametrize("target", TARGETS)
def test_rendered_objects_are_valid(target):
    objs = render(target)
    assert objs
    for obj in objs:
        validate(obj)
        assert obj["metadata"].get("namespace") in ("gpuwarden", None)
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "gpuwarden", obj["metadata"]["name"]
    for pod in pod_specs(objs):
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["image"] == IMAGE
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert sc["readOnlyRootFilesystem"] is True


def pod_specs(objs):
    for obj in objs:
        spec = obj.get("spec") or {}
        if obj["kind"] in ("Deployment", "DaemonSet"):
            yield spec["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield spec["jobTemplate"]["spec"]["template"]["spec"]


def by_kind(objs, kind, name):
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_rbac_is_least_privilege():
    objs = render("overlays/production")
    roles = {
        o["metadata"]["name"]: o["rules"] for o in objs if o["kind"] in ("ClusterRole", "Role")
    }
    assert roles == {
        "gpuwarden-tagger": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}],
        "gpuwarden-extender": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
    }  # fmt: skip
    accounts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceAccount"}
    assert accounts["gpuwarden-collect"]["automountServiceAccountToken"] is False
    assert accounts["gpuwarden-report"]["automountServiceAccountToken"] is False
    serve = by_kind(objs, "Deployment", "gpuwarden-serve")["spec"]["template"]["spec"]
    assert serve["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}


def test_the_prometheus_rule_is_the_alert_rules_file_and_promtool_accepts_it(tmp_path):
    rule = by_kind(render("overlays/monitoring"), "PrometheusRule", "gpuwarden")
    source = yaml.safe_load(
        (ROOT / "gpuwarden" / "alerts" / "rules" / "gpuwarden.rules.yml").read_text()
    )
    assert rule["spec"]["groups"] == source["groups"]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(
        [need("promtool"), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_a_bad_object_fails_the_checks():
    """The checks can fail: a typo'd field and a ServiceMonitor without endpoints."""
    bad = yaml.safe_load((DEPLOY / "base" / "report-cronjob.yaml").read_text())
    bad["spec"]["schedul"] = bad["spec"].pop("schedule")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    monitor = yaml.safe_load((DEPLOY / "parts" / "monitoring" / "servicemonitor.yaml").read_text())
    monitor["spec"]["endpoints"] = [{"port": 9400}]  # a port name, not a number
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


EXTENDER_FIELDS = {  # k8s.io/kube-scheduler/config/v1 Extender, JSON names
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip


def test_the_scheduler_configuration_names_the_extenders_routes():
    from gpuwarden.scheduler_hooks.k8s_extender import ROUTES

    cfg = yaml.safe_load((DEPLOY / "scheduler" / "kube-scheduler-config.yaml").read_text())
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    [ext] = cfg["extenders"]
    assert set(ext) <= EXTENDER_FIELDS
    assert ext["nodeCacheCapable"] is True and "bindVerb" not in ext
    for verb in (ext["filterVerb"], ext["prioritizeVerb"]):
        assert ROUTES[f"/{verb}"][0] == "POST"
    service = by_kind(render("overlays/extender"), "Service", "gpuwarden-extender")
    assert ext["urlPrefix"] == (
        f"http://{service['metadata']['name']}.gpuwarden.svc:{service['spec']['ports'][0]['port']}"
    )

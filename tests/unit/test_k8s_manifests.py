"""The kustomize overlays render, every object validates against the Kubernetes schemas,
and the deployment rules hold: probes, resources, service accounts, HPAs on real
Deployments, graceful termination, non-root pods, and network policies per caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from agentfleet.config import DEFAULT_PORTS, SERVICE_NAMES

from .kustomize_render import KustomizeError, render

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"
K8S_VERSION = "1.33"
NAMESPACES = {"dev": "agentfleet-dev", "prod": "agentfleet"}
# Who may call each service, besides labelled clients (agentfleet.io/client=true).
CALLERS = {
    "executor": ({"dispatcher"}, True),
    "toolpool": ({"executor"}, False),
    "dispatcher": (set(), True),
    "history": ({"dispatcher"}, True),
}

Object = dict[str, Any]


@pytest.fixture(scope="module", params=sorted(NAMESPACES))
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Object]]:
    return request.param, render(OVERLAYS / request.param)


def of_kind(objects: list[Object], kind: str) -> dict[str, Object]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def component(obj: Object) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def agentfleet_deployments(objects: list[Object]) -> dict[str, Object]:
    return {
        component(d): d
        for d in of_kind(objects, "Deployment").values()
        if d["metadata"]["labels"].get("app.kubernetes.io/name") == "agentfleet"
    }


def test_every_rendered_object_validates_against_the_schemas(
    overlay: tuple[str, list[Object]],
) -> None:
    _name, objects = overlay
    for obj in objects:
        # strict: an unknown or misspelt field fails too.
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_validator_catches_a_bad_object() -> None:
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two"},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_everything_lands_in_the_overlay_namespace(overlay: tuple[str, list[Object]]) -> None:
    name, objects = overlay
    assert set(of_kind(objects, "Namespace")) == {NAMESPACES[name]}
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == NAMESPACES[name], obj["metadata"]


def test_each_service_has_a_deployment_with_probes_resources_and_an_account(
    overlay: tuple[str, list[Object]],
) -> None:
    _name, objects = overlay
    deployments = agentfleet_deployments(objects)
    assert set(deployments) == set(SERVICE_NAMES)
    accounts = of_kind(objects, "ServiceAccount")
    grace_s = float(
        of_kind(objects, "ConfigMap")["agentfleet-config"]["data"]["AGENTFLEET_SHUTDOWN_GRACE_S"]
    )
    for service, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts
        assert pod["terminationGracePeriodSeconds"] > grace_s + 10
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["args"] == [service]
        port = DEFAULT_PORTS[service]
        assert [p["containerPort"] for p in container["ports"]] == [port]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["grpc"] == {"port": port}, (service, probe)
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) >= {"cpu", "memory"}, (service, bound)
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_each_service_gets_a_service_an_hpa_and_a_pdb(overlay: tuple[str, list[Object]]) -> None:
    _name, objects = overlay
    deployments = of_kind(objects, "Deployment")
    hpas = list(of_kind(objects, "HorizontalPodAutoscaler").values())
    assert {h["spec"]["scaleTargetRef"]["name"] for h in hpas} == {
        d["metadata"]["name"] for d in agentfleet_deployments(objects).values()
    }
    for hpa in hpas:
        assert hpa["apiVersion"] == "autoscaling/v2"
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
        assert target["name"] in deployments
        assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    services = of_kind(objects, "Service")
    pdbs = of_kind(objects, "PodDisruptionBudget").values()
    for name, deployment in agentfleet_deployments(objects).items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        service = services[name]
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["port"] == DEFAULT_PORTS[name]
        covering = [
            p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(covering) == 1, name
    # The addresses in the config map are these Services.
    data = of_kind(objects, "ConfigMap")["agentfleet-config"]["data"]
    for name in SERVICE_NAMES:
        assert data[f"AGENTFLEET_{name.upper()}_ADDR"] == f"{name}:{DEFAULT_PORTS[name]}"


def test_network_policies_let_in_only_each_services_callers(
    overlay: tuple[str, list[Object]],
) -> None:
    _name, objects = overlay
    policies = of_kind(objects, "NetworkPolicy")
    for service, (components, clients) in CALLERS.items():
        policy = policies[f"agentfleet-{service}"]["spec"]
        assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == service
        assert policy["policyTypes"] == ["Ingress"]
        (rule,) = policy["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": DEFAULT_PORTS[service]}]
        allowed = {
            s["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for s in rule["from"]
            if "podSelector" in s
            and "app.kubernetes.io/component" in s["podSelector"]["matchLabels"]
        }
        assert allowed == components, service
        takes_clients = any(
            s.get("podSelector", {}).get("matchLabels") == {"agentfleet.io/client": "true"}
            for s in rule["from"]
        )
        assert takes_clients == clients, service


def test_a_job_applies_the_migrations(overlay: tuple[str, list[Object]]) -> None:
    _name, objects = overlay
    job = of_kind(objects, "Job")["agentfleet-migrate"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    images = {
        d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in agentfleet_deployments(objects).values()
    }
    assert images == {container["image"]}
    assert container["args"] == ["migrate", "up"]


def database_url_source(container: Object) -> Any:
    for env in container.get("env", []):
        if env["name"] == "DATABASE_URL":
            return env["valueFrom"]["secretKeyRef"]
    return None


def test_dev_runs_postgres_and_a_collector_in_the_cluster() -> None:
    objects = render(OVERLAYS / "dev")
    assert "postgres" in of_kind(objects, "StatefulSet")
    assert "otel-collector" in of_kind(objects, "Deployment")
    data = of_kind(objects, "ConfigMap")["agentfleet-config"]["data"]
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
    assert "otel-collector" in of_kind(objects, "Service")
    url = of_kind(objects, "Secret")["agentfleet-secrets"]["stringData"]["DATABASE_URL"]
    assert "@postgres:5432/" in url
    # Only agentfleet pods reach PostgreSQL.
    rule = of_kind(objects, "NetworkPolicy")["postgres"]["spec"]["ingress"][0]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentfleet"}}}
    ]


def test_prod_takes_the_database_url_from_its_own_secret() -> None:
    objects = render(OVERLAYS / "prod")
    assert not of_kind(objects, "StatefulSet")
    data = of_kind(objects, "ConfigMap")["agentfleet-config"]["data"]
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("https://")
    pods = [d["spec"]["template"]["spec"] for d in of_kind(objects, "Deployment").values()]
    pods.append(of_kind(objects, "Job")["agentfleet-migrate"]["spec"]["template"]["spec"])
    for pod in pods:
        source = database_url_source(pod["containers"][0])
        assert source == {"name": "agentfleet-database", "key": "url"}


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nimages: [{name: x}]\n")
    with pytest.raises(KustomizeError, match="images"):
        render(tmp_path)

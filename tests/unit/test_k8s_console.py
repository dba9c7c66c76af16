"""deploy/k8s/components/console (issue 34): the console's Deployment, Service, NetworkPolicy
and TLS Ingress render with the dev and prod overlays, validate against the Kubernetes
schemas, and hold no platform credential."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from agentfleet.console_settings import DEFAULT_PORT

from .kustomize_render import render
from .test_k8s_manifests import K8S_VERSION, compose, of_kind

Object = dict[str, Any]


@pytest.fixture(scope="module", params=["dev", "prod"])
def objects(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[Object]:
    folder = compose(tmp_path_factory.mktemp("console"), request.param, ["console"])
    return render(folder)


def test_everything_validates(objects: list[Object]) -> None:
    for obj in objects:
        if not obj["apiVersion"].startswith("keda.sh/"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_console_pod_holds_no_secret_and_no_service_token(objects: list[Object]) -> None:
    deployment = of_kind(objects, "Deployment")["agentfleet-console"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["console"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http", DEFAULT_PORT)]
    assert all("secretRef" not in source for source in container.get("envFrom", []))
    assert all("valueFrom" not in variable for variable in container.get("env", []))
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]  # no token files
    env = {v["name"]: v["value"] for v in container["env"]}
    assert env["AGENTFLEET_CONSOLE_SECURE_COOKIES"] == "on"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_ingress_serves_tls_to_the_console_service(objects: list[Object]) -> None:
    ingress = of_kind(objects, "Ingress")["agentfleet-console"]
    (tls,) = ingress["spec"]["tls"]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in tls["hosts"]
    assert tls["secretName"]
    deployment = of_kind(objects, "Deployment")["agentfleet-console"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {v["name"]: v["value"] for v in container["env"]}
    assert env["AGENTFLEET_CONSOLE_ALLOWED_HOSTS"] == rule["host"]  # the Host check passes
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {"name": "console", "port": {"name": "http"}}
    service = of_kind(objects, "Service")["console"]
    assert service["spec"]["ports"][0]["port"] == DEFAULT_PORT


def test_network_policies_let_the_console_reach_what_it_calls(objects: list[Object]) -> None:
    policies = of_kind(objects, "NetworkPolicy")
    own = policies["agentfleet-console"]["spec"]["ingress"]
    assert own == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"agentfleet.io/ingress": "true"}}}],
            "ports": [{"protocol": "TCP", "port": DEFAULT_PORT}],
        }
    ]
    labels = of_kind(objects, "Deployment")["agentfleet-console"]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert labels["agentfleet.io/client"] == "true"  # executor, dispatcher, history
    toolpool = policies["agentfleet-toolpool"]["spec"]["ingress"][0]["from"]
    components = {
        s["podSelector"]["matchLabels"].get("app.kubernetes.io/component")
        for s in toolpool
        if "podSelector" in s
    }
    assert components == {"executor", "console"}


def test_the_component_is_named_in_the_readme() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "deploy/k8s/components/console" in readme

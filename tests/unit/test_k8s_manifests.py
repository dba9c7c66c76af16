"""The kustomize overlays (dev, prod, and dev with the opt-in KEDA component) render with the
real kustomize (``kubectl kustomize``), every object validates against the Kubernetes schemas
(the KEDA ScaledObjects against KEDA's), and the deployment rules hold: probes, resources,
service accounts, one autoscaler per Deployment (KEDA on queue depth for executors and
dispatchers where the component is in, with the queries of :mod:`agentfleet.queue_depth`; CPU
HPAs otherwise), graceful termination, non-root pods, network policies per caller, metrics
ports, each pod holding only the Secret keys it needs, and no rendered placeholder Secret
that an apply would write over the real one (README.md creates those)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from agentfleet.config import DEFAULT_METRICS_PORTS, DEFAULT_PORTS, SERVICE_NAMES
from agentfleet.queue_depth import DISPATCHER_LOAD_SQL, EXECUTOR_LOAD_SQL

from .kustomize_render import KustomizeError, render

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"
COMPONENTS = ROOT / "deploy" / "k8s" / "components"
README = ROOT / "README.md"
K8S_VERSION = "1.33"
KEDA_SCHEMA = json.loads(
    (Path(__file__).parent / "schemas" / "keda_scaledobject_v1alpha1.json").read_text()
)
# What KEDA scales each service on: its query, and the setting a pod's worth of work is.
SCALED = {
    "executor": (EXECUTOR_LOAD_SQL, "AGENTFLEET_EXECUTOR_CONCURRENCY"),
    "dispatcher": (DISPATCHER_LOAD_SQL, "AGENTFLEET_DISPATCHER_SLOTS"),
}
# The Secret keys each pod may hold: env keys of agentfleet-secrets, and service-token files.
SECRET_ENV = {
    "executor": {"DATABASE_URL", "GEMINI_API_KEY"},
    "toolpool": {"DATABASE_URL"},
    "dispatcher": {"DATABASE_URL"},
    "history": {"DATABASE_URL"},
    "a2a": {"DATABASE_URL"},
}
TOKEN_FILES = {
    "executor": ["executor"],
    "dispatcher": ["dispatcher"],
    "toolpool": [],
    "history": [],
    "a2a": [],
}
NAMESPACES = {"dev": "agentfleet-dev", "prod": "agentfleet"}
# What the overlay fixture renders: an overlay, with the components added to it. dev needs no
# KEDA; prod and dev with components/keda (README's "Scaling recipe") scale on queue depth.
RENDERED = {
    "dev": ("dev", []),
    "dev+keda": ("dev", ["keda"]),
    "prod": ("prod", []),
}
# Who may call each service, besides labelled clients (agentfleet.io/client=true).
CALLERS = {
    "executor": ({"dispatcher", "a2a"}, True),
    "toolpool": ({"executor"}, False),
    "dispatcher": (set(), True),
    "history": ({"dispatcher", "a2a"}, True),
    "a2a": (set(), True),
}
# Services with an HTTP port besides gRPC and metrics; their callers reach that port only.
HTTP_PORTS = {"a2a": 50055}
# Other ports those callers reach too (the A2A gRPC binding), as (container port name, port).
EXTRA_PORTS = {"a2a": [("a2a-grpc", 50057)]}

Object = dict[str, Any]


def compose(folder: Path, overlay: str, components: list[str]) -> Path:
    """A kustomization in ``folder`` of ``overlay`` with ``components`` added, as a user's
    own overlay would be: in the overlay's namespace, which the components' objects need too
    (kustomize takes relative paths only)."""
    if not components:
        return OVERLAYS / overlay
    resource = os.path.relpath(OVERLAYS / overlay, folder)
    added = ", ".join(os.path.relpath(COMPONENTS / c, folder) for c in components)
    (folder / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {NAMESPACES[overlay]}\n"
        f"resources: [{resource}]\n"
        f"components: [{added}]\n"
    )
    return folder


@pytest.fixture(scope="module", params=sorted(RENDERED))
def overlay(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[Object]]:
    """(overlay name, its objects), for dev, prod and dev with components/keda."""
    name, components = RENDERED[request.param]
    folder = compose(tmp_path_factory.mktemp("overlay"), name, components)
    return request.param, render(folder)


def scales_with_keda(name: str) -> bool:
    return name == "prod" or "keda" in RENDERED[name][1]


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
        if obj["apiVersion"].startswith("keda.sh/"):
            assert obj["kind"] == "ScaledObject", obj["kind"]
            jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(obj)
            continue
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


@pytest.mark.parametrize(
    "spec",
    [
        {"scaleTargetRef": {"name": "x"}},  # no triggers
        {"scaleTargetRef": {"name": "x"}, "triggers": [], "minReplicas": 2},  # HPA's field name
        {"scaleTargetRef": {"name": "x"}, "triggers": [{"type": "postgresql", "metadata": 5}]},
        {"scaleTargetRef": {}, "triggers": []},  # no target name
    ],
)
def test_the_keda_schema_catches_a_bad_scaled_object(spec: dict[str, Any]) -> None:
    broken = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "x"},
        "spec": spec,
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(KEDA_SCHEMA).validate(broken)


def test_everything_lands_in_the_overlay_namespace(overlay: tuple[str, list[Object]]) -> None:
    name, objects = overlay
    namespace = NAMESPACES[RENDERED[name][0]]
    assert set(of_kind(objects, "Namespace")) == {namespace}
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace, obj["metadata"]


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
        metrics_port = DEFAULT_METRICS_PORTS[service]
        http = [("http", HTTP_PORTS[service])] if service in HTTP_PORTS else []
        assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
            ("grpc", port),
            ("metrics", metrics_port),
            *http,
            *EXTRA_PORTS.get(service, []),
        ]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics_port)
        assert annotations["prometheus.io/path"] == "/metrics"
        # Readiness follows the service's dependencies; liveness (and startup) only the process.
        for probe, health in (
            ("readinessProbe", "readiness"),
            ("livenessProbe", "liveness"),
            ("startupProbe", "liveness"),
        ):
            assert container[probe]["grpc"] == {"port": port, "service": health}, (service, probe)
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) >= {"cpu", "memory"}, (service, bound)
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_each_service_gets_a_service_one_autoscaler_and_a_pdb(
    overlay: tuple[str, list[Object]],
) -> None:
    name, objects = overlay
    deployments = of_kind(objects, "Deployment")
    hpas = list(of_kind(objects, "HorizontalPodAutoscaler").values())
    scaled = list(of_kind(objects, "ScaledObject").values())
    targets = [h["spec"]["scaleTargetRef"]["name"] for h in hpas + scaled]
    # One autoscaler per Deployment: KEDA's HPA would fight a second one.
    assert sorted(targets) == sorted(
        d["metadata"]["name"] for d in agentfleet_deployments(objects).values()
    )
    # Without components/keda, nothing needs KEDA: the base's CPU HPAs scale every service.
    assert {component(s) for s in scaled} == (set(SCALED) if scales_with_keda(name) else set())
    if not scales_with_keda(name):
        assert not [o for o in objects if o["apiVersion"].startswith("keda.sh/")]
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
        rule, monitoring = policy["ingress"]
        called_on = HTTP_PORTS.get(service, DEFAULT_PORTS[service])
        extra = [{"protocol": "TCP", "port": p} for _, p in EXTRA_PORTS.get(service, [])]
        assert rule["ports"] == [{"protocol": "TCP", "port": called_on}, *extra]
        # Prometheus reaches the metrics port only, from a labelled monitoring namespace.
        assert monitoring == {
            "from": [{"namespaceSelector": {"matchLabels": {"agentfleet.io/monitoring": "true"}}}],
            "ports": [{"protocol": "TCP", "port": DEFAULT_METRICS_PORTS[service]}],
        }
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


def test_keda_scales_executors_and_dispatchers_on_the_queue_depth_queries(
    overlay: tuple[str, list[Object]],
) -> None:
    _name, objects = overlay
    config = of_kind(objects, "ConfigMap")["agentfleet-config"]["data"]
    deployments = agentfleet_deployments(objects)
    for scaled in of_kind(objects, "ScaledObject").values():
        service = component(scaled)
        query, per_pod = SCALED[service]
        spec = scaled["spec"]
        target = deployments[service]
        assert spec["scaleTargetRef"]["name"] == target["metadata"]["name"]
        (container,) = target["spec"]["template"]["spec"]["containers"]
        assert spec["scaleTargetRef"]["envSourceContainerName"] == container["name"]
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "postgresql"
        # Word for word the statement the integration test runs against the schema.
        assert trigger["metadata"]["query"] == query
        # Runs (or tasks) one pod takes: its setting times its worker processes.
        processes = {e["name"]: e.get("value") for e in container["env"]}.get(
            f"AGENTFLEET_{service.upper()}_PROCESSES", "1"
        )
        assert trigger["metadata"]["targetQueryValue"] == str(int(config[per_pod]) * int(processes))
        # KEDA connects with the URL the scaled container itself uses.
        env = {e["name"] for e in container["env"]}
        assert trigger["metadata"]["connectionFromEnv"] in env


def secret_sources(container: Object) -> tuple[dict[str, Any], list[Object]]:
    """The container's env entries read from a Secret (name -> secretKeyRef), and its
    envFrom entries."""
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    return refs, container.get("envFrom", [])


def token_files(pod: Object) -> list[str]:
    keys = []
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            keys += [item["key"] for item in volume["secret"]["items"]]
    return keys


def test_each_pod_holds_only_the_secret_keys_it_needs(overlay: tuple[str, list[Object]]) -> None:
    _name, objects = overlay
    for service, deployment in agentfleet_deployments(objects).items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        refs, env_from = secret_sources(container)
        # Never a whole Secret: a key added to it later reaches no pod by accident.
        assert all("secretRef" not in source for source in env_from), service
        assert set(refs) == SECRET_ENV[service], service
        assert container["env"][0]["name"] == "DATABASE_URL"
        # Each service's own token only; the toolpool and the history call nobody, and the
        # a2a service calls with its callers' tokens.
        assert token_files(pod) == TOKEN_FILES[service], service
    job = of_kind(objects, "Job")["agentfleet-migrate"]["spec"]["template"]["spec"]
    refs, env_from = secret_sources(job["containers"][0])
    assert set(refs) == {"DATABASE_URL"}
    assert all("secretRef" not in source for source in env_from)
    assert token_files(job) == []


def test_the_dispatcher_gets_the_model_key_only_with_its_llm_component(tmp_path: Path) -> None:
    deployments = agentfleet_deployments(render(compose(tmp_path, "prod", ["dispatcher-llm"])))
    (container,) = deployments["dispatcher"]["spec"]["template"]["spec"]["containers"]
    refs, _ = secret_sources(container)
    assert set(refs) == {"DATABASE_URL", "GEMINI_API_KEY"}
    assert refs["DATABASE_URL"] == {"name": "agentfleet-database", "key": "url"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AGENTFLEET_DISPATCHER_SELECTOR_MODEL"]
    assert env["AGENTFLEET_DISPATCHER_EVALUATOR_MODEL"]
    assert env["AGENTFLEET_DISPATCHER_TRIAGE_MODEL"]
    for service in ("toolpool", "history"):
        (other,) = deployments[service]["spec"]["template"]["spec"]["containers"]
        assert "GEMINI_API_KEY" not in secret_sources(other)[0], service


def test_kustomize_errors_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    with pytest.raises(KustomizeError, match=r"missing\.yaml"):
        render(tmp_path)


def referenced_secret_keys(objects: list[Object]) -> set[tuple[str, str | None]]:
    """(Secret name, key) for every Secret key a pod template reads: env secretKeyRef,
    volumes' secret items (key None: a whole Secret, from envFrom or a volume without
    items)."""
    refs: set[tuple[str, str | None]] = set()
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if obj["kind"] == "CronJob":
            template = obj["spec"]["jobTemplate"]["spec"]["template"]
        if not template:
            continue
        pod = template["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            env_refs, env_from = secret_sources(container)
            refs |= {(r["name"], r["key"]) for r in env_refs.values()}
            refs |= {(s["secretRef"]["name"], None) for s in env_from if "secretRef" in s}
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                items = volume["secret"].get("items")
                refs |= {(name, i["key"]) for i in items} if items else {(name, None)}
    return refs


def readme_secret_commands() -> list[str]:
    """Each ``kubectl ... create secret generic`` line of README.md's ```sh blocks, lines
    continued with a backslash joined."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    lines = "".join(blocks).replace("\\\n", " ").splitlines()
    return [line for line in lines if re.search(r"\bkubectl\b.*\bcreate secret generic\b", line)]


def readme_created_secrets() -> dict[tuple[str, str], set[str]]:
    """The Secrets README.md tells you to create: (namespace, name) -> keys, from each
    ``kubectl -n NS create secret generic NAME --from-literal=KEY=... --from-file=KEY=...``."""
    created: dict[tuple[str, str], set[str]] = {}
    for line in readme_secret_commands():
        words = shlex.split(line.split("|")[0].split("#")[0])
        words = words[words.index("kubectl") :]
        namespace = "default"
        for flag in ("-n", "--namespace"):
            if flag in words:
                namespace = words[words.index(flag) + 1]
        name = words[words.index("generic") + 1]
        keys = created.setdefault((namespace, name), set())
        for word in words:
            match = re.match(r"--from-(?:literal|file)=([^=]+)=", word)
            if match:
                keys.add(match.group(1))
    return created


def test_the_readme_parses_secret_commands() -> None:
    # The parser the next tests rely on finds commands (continued over lines) and their keys.
    created = readme_created_secrets()
    assert created, "README.md has no `kubectl create secret generic` command"
    for keys in created.values():
        assert keys, created
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", k) for k in keys), created


def test_the_readmes_secret_commands_can_be_run_again() -> None:
    # A plain `create secret` fails with AlreadyExists the second time a block is run.
    commands = readme_secret_commands()
    assert commands
    for line in commands:
        assert re.search(r"--dry-run=client -o yaml \| kubectl apply -f -\s*$", line), line


def test_prod_renders_no_secret_and_the_readme_creates_every_one_it_reads() -> None:
    objects = render(OVERLAYS / "prod")
    # kubectl apply -k would overwrite the real keys and tokens with whatever it renders.
    assert of_kind(objects, "Secret") == {}
    assert "CHANGE-ME" not in json.dumps(objects)
    created = readme_created_secrets()
    for name, key in sorted(referenced_secret_keys(objects), key=str):
        keys = created.get((NAMESPACES["prod"], name))
        assert keys is not None, f"README.md never creates Secret {name} for prod"
        assert key is None or key in keys, f"README.md's {name} for prod lacks key {key}"


def test_dev_renders_or_the_readme_creates_every_secret_it_reads() -> None:
    objects = render(OVERLAYS / "dev")
    rendered = {
        name: set(s.get("stringData", {})) | set(s.get("data", {}))
        for name, s in of_kind(objects, "Secret").items()
    }
    created = readme_created_secrets()
    for name, key in sorted(referenced_secret_keys(objects), key=str):
        from_readme = created.get((NAMESPACES["dev"], name))
        # Never both: a later `kubectl apply -k` would overwrite what you created.
        assert (name in rendered) != (from_readme is not None), name
        keys = rendered.get(name, from_readme)
        assert key is None or key in keys, (name, key)
    # Service tokens exist only in the database they were created in: never rendered.
    assert "agentfleet-service-tokens" not in rendered


def test_the_readmes_local_image_overlay_runs_the_image_it_builds(tmp_path: Path) -> None:
    # README's "Your own image": the kustomization its heredoc writes next to overlays/dev,
    # rendered from here with the same relative path to dev.
    (block,) = [
        b
        for b in re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
        if "overlays/local/kustomization.yaml" in b
    ]
    built = re.search(r"^docker build -t (\S+) \.$", block, re.MULTILINE)
    assert built is not None
    written = re.search(r"<<'EOF'\n(.*?)^EOF$", block, re.MULTILINE | re.DOTALL)
    assert written is not None
    assert "resources: [../dev]" in written.group(1)
    dev = os.path.relpath(OVERLAYS / "dev", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        written.group(1).replace("resources: [../dev]", f"resources: [{dev}]")
    )
    objects = render(tmp_path)
    pods = [d["spec"]["template"]["spec"] for d in agentfleet_deployments(objects).values()]
    pods.append(of_kind(objects, "Job")["agentfleet-migrate"]["spec"]["template"]["spec"])
    images = {c["image"] for pod in pods for c in pod["containers"]}
    assert images == {built.group(1)}
    assert not built.group(1).endswith(":latest")
    # Everything else is dev's, unchanged.
    assert len(objects) == len(render(OVERLAYS / "dev"))

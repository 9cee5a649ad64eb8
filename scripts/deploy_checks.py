"""Checks of what an operator deploys (deploy/), run by scripts/check-deploy.sh.

  manifests ROOT TOLLGATE   every Kubernetes manifest under ROOT: built-in kinds against the
                            Kubernetes schemas kubernetes-validate ships (strict: an unknown
                            field is an error), Envoy Gateway's kinds against the fields of its
                            API that these files use, and what no schema checks: references
                            between the manifests, the pod's safety settings, the shutdown
                            timing, and the tollgate config in the ConfigMap (`TOLLGATE
                            check-config`).
  manifest-mutants ROOT TOLLGATE
                            the manifest checks catch a broken manifest: a misspelt field of
                            the Deployment, an Envoy Gateway value out of its enum, a limit the
                            config cannot parse, a grace period shorter than the drain; each copy
                            of ROOT with one of them must fail `manifests`.
  alerts RULES TESTS        every alert of RULES has a unit test in TESTS that fires it and one
                            that keeps it silent, and a severity and a summary.
  mutants RULES TESTS PROMTOOL
                            the unit tests catch a broken alert: for each alert, RULES with its
                            threshold moved up by one and, when it has a `for`, without it;
                            `PROMTOOL test rules TESTS` must fail on every such copy.
  image INSPECT             the config of a built image (`buildah inspect --type image`): runs
                            as a user without privileges, `tollgate` as the entry point, the
                            documented ports exposed; prints `user`, `env` and `command` lines
                            for the shell to start it with.

Runs on the Python of the kubernetes-validate virtual environment (it brings PyYAML). Every
error names the file and the path to the field; the exit status is 1 when any was found.
"""

import copy
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ERRORS = []


def error(file, path, message):
    ERRORS.append(f"{file}: {path}: {message}")


# --- Envoy Gateway's kinds -------------------------------------------------------------------
#
# Not in Kubernetes' schemas. Each is written down here from Envoy Gateway's published API
# (api/v1alpha1: EnvoyGateway, BackendTrafficPolicy and the rate limit types), for the fields
# these files use: a dict schema lists every field allowed (an unknown one is an error, as a
# misspelt field would be ignored by nothing but a CRD's structural schema) and the required
# ones.

STR, INT, BOOL = "string", "integer", "boolean"
RESOURCES = {"fields": {"requests": {"map": STR}, "limits": {"map": STR}}}
ENVOY_GATEWAY = {
    "required": ["apiVersion", "kind", "gateway", "provider"],
    "fields": {
        "apiVersion": {"const": "gateway.envoyproxy.io/v1alpha1"},
        "kind": {"const": "EnvoyGateway"},
        "gateway": {"required": ["controllerName"], "fields": {"controllerName": STR}},
        "logging": {"fields": {"level": {"map": {"enum": ["debug", "info", "warn", "error"]}}}},
        "provider": {
            "required": ["type"],
            "fields": {
                "type": {"enum": ["Kubernetes", "Custom"]},
                "kubernetes": {
                    "fields": {
                        "rateLimitDeployment": {
                            "fields": {
                                "replicas": INT,
                                "container": {
                                    "fields": {"image": STR, "resources": RESOURCES},
                                },
                            },
                        },
                    },
                },
            },
        },
        "rateLimit": {
            "required": ["backend"],
            "fields": {
                "backend": {
                    "required": ["type"],
                    "fields": {
                        "type": {"enum": ["Redis"]},
                        "redis": {"required": ["url"], "fields": {"url": STR}},
                    },
                },
                "timeout": STR,
                "failClosed": BOOL,
            },
        },
    },
}
RATE_LIMIT_RULE = {
    "required": ["limit"],
    "fields": {
        "clientSelectors": {
            "list": {
                "fields": {
                    "headers": {
                        "list": {
                            "required": ["name"],
                            "fields": {
                                "name": STR,
                                "type": {"enum": ["Exact", "RegularExpression", "Distinct"]},
                                "value": STR,
                                "invert": BOOL,
                            },
                        },
                        "max": 16,
                    },
                    "sourceCIDR": {
                        "required": ["value"],
                        "fields": {"type": {"enum": ["Exact", "Distinct"]}, "value": STR},
                    },
                },
            },
            "max": 8,
        },
        "limit": {
            "required": ["requests", "unit"],
            "fields": {
                "requests": INT,
                "unit": {"enum": ["Second", "Minute", "Hour", "Day", "Month", "Year"]},
            },
        },
        "shadowMode": BOOL,
    },
}
BACKEND_TRAFFIC_POLICY = {
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "fields": {
        "apiVersion": {"const": "gateway.envoyproxy.io/v1alpha1"},
        "kind": {"const": "BackendTrafficPolicy"},
        "metadata": {"required": ["name"], "fields": {"name": STR, "namespace": STR}},
        "spec": {
            "fields": {
                "targetRefs": {
                    "list": {
                        "required": ["group", "kind", "name"],
                        "fields": {
                            "group": {"const": "gateway.networking.k8s.io"},
                            "kind": {"enum": ["Gateway", "HTTPRoute", "GRPCRoute"]},
                            "name": STR,
                            "sectionName": STR,
                        },
                    },
                    "max": 16,
                },
                "rateLimit": {
                    "fields": {
                        "type": {"enum": ["Global", "Local"]},
                        "global": {
                            "required": ["rules"],
                            "fields": {"rules": {"list": RATE_LIMIT_RULE, "max": 128}},
                        },
                    },
                },
            },
        },
    },
}


def join(path, key):
    return f"{path}.{key}" if path else str(key)


def check_schema(file, path, value, schema):
    """Checks `value` against one of the small schemas above."""
    if isinstance(schema, str):
        expected = {STR: str, INT: int, BOOL: bool}[schema]
        if not isinstance(value, expected) or (schema == INT and isinstance(value, bool)):
            error(file, path, f"expected a {schema}, got {value!r}")
        return
    if "const" in schema:
        if value != schema["const"]:
            error(file, path, f"expected {schema['const']!r}, got {value!r}")
        return
    if "enum" in schema:
        if value not in schema["enum"]:
            error(file, path, f"expected one of {schema['enum']}, got {value!r}")
        return
    if "map" in schema:
        if not isinstance(value, dict):
            error(file, path, f"expected a mapping, got {value!r}")
            return
        for key, item in value.items():
            check_schema(file, join(path, key), item, schema["map"])
        return
    if "list" in schema:
        if not isinstance(value, list) or not value:
            error(file, path, f"expected a non-empty list, got {value!r}")
            return
        if len(value) > schema.get("max", len(value)):
            error(file, path, f"at most {schema['max']} items, got {len(value)}")
        for index, item in enumerate(value):
            check_schema(file, f"{path}[{index}]", item, schema["list"])
        return
    if not isinstance(value, dict):
        error(file, path, f"expected a mapping, got {value!r}")
        return
    for key in schema.get("required", []):
        if key not in value:
            error(file, path or "-", f"missing required field `{key}`")
    for key, item in value.items():
        if key not in schema["fields"]:
            error(file, join(path, key), f"unknown field; expected one of {sorted(schema['fields'])}")
        else:
            check_schema(file, join(path, key), item, schema["fields"][key])


# --- Manifests --------------------------------------------------------------------------------


def load_documents(root):
    documents = []
    for file in sorted(pathlib.Path(root).rglob("*.yaml")):
        with open(file) as handle:
            for index, document in enumerate(yaml.safe_load_all(handle)):
                if document is not None:
                    documents.append((f"{file}[{index}]", document))
    if not documents:
        error(root, "-", "no manifest found")
    return documents


def duration_seconds(text):
    """`5s`, `1m`, `500ms` as seconds (the forms these manifests use)."""
    for unit, factor in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * factor
    raise ValueError(f"not a duration: {text!r}")


def flag(args, name):
    """The value of `--name=value` in a container's args, or None."""
    for arg in args:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def check_deployment(file, deployment, by_kind):
    """What the schema cannot say about tollgate's Deployment."""
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"].get("labels", {})
    at = "spec.template.spec"
    if spec["selector"].get("matchLabels", {}).items() - labels.items():
        error(file, "spec.selector.matchLabels", "does not match the pod template's labels")
    if pod.get("automountServiceAccountToken") is not False:
        error(file, f"{at}.automountServiceAccountToken", "must be false: tollgate never calls the API")
    if pod.get("securityContext", {}).get("runAsNonRoot") is not True:
        error(file, f"{at}.securityContext.runAsNonRoot", "must be true")
    containers = [c for c in pod["containers"] if c["name"] == "tollgate"]
    if len(containers) != 1:
        error(file, f"{at}.containers", "expected one container named tollgate")
        return
    container = containers[0]
    cat = f"{at}.containers[tollgate]"
    security = container.get("securityContext", {})
    if security.get("readOnlyRootFilesystem") is not True:
        error(file, f"{cat}.securityContext.readOnlyRootFilesystem", "must be true")
    if security.get("allowPrivilegeEscalation") is not False:
        error(file, f"{cat}.securityContext.allowPrivilegeEscalation", "must be false")
    resources = container.get("resources", {})
    if "memory" not in resources.get("limits", {}) or "cpu" not in resources.get("requests", {}):
        error(file, f"{cat}.resources", "needs a memory limit and a cpu request")
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container.get(probe, {}).get("httpGet", {})
        if get.get("path") != path:
            error(file, f"{cat}.{probe}.httpGet.path", f"expected {path}, got {get.get('path')!r}")
        if get.get("port") not in ports:
            error(file, f"{cat}.{probe}.httpGet.port", f"{get.get('port')!r} is not a port of the container")
    args = container.get("args", [])
    if args[:1] != ["serve"]:
        error(file, f"{cat}.args", "expected `serve` first")
    for name, port in (("http", 8080), ("grpc", 8081)):
        address = flag(args, name)
        if address != f"0.0.0.0:{port}" or ports.get(name) != port:
            error(file, f"{cat}.args", f"--{name} {address!r} and the port named {name} must agree on {port}")
    try:
        delay = duration_seconds(flag(args, "shutdown-delay") or "")
        drain = duration_seconds(flag(args, "drain-timeout") or "")
    except ValueError as err:
        error(file, f"{cat}.args", f"--shutdown-delay and --drain-timeout: {err}")
    else:
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not delay + drain < grace <= delay + drain + 30:
            error(
                file,
                f"{at}.terminationGracePeriodSeconds",
                f"{grace} s: must exceed the shutdown delay and the drain ({delay + drain:g} s), "
                "by at most 30 s",
            )
    for volume in pod.get("volumes", []):
        name = volume.get("configMap", {}).get("name")
        if name and name not in by_kind.get("ConfigMap", {}):
            error(file, f"{at}.volumes[{volume['name']}]", f"no ConfigMap {name} among the manifests")
    for variable in container.get("env", []):
        secret = variable.get("valueFrom", {}).get("secretKeyRef")
        if secret and not secret.get("optional") and secret["name"] not in by_kind.get("Secret", {}):
            error(file, f"{cat}.env[{variable['name']}]", f"no Secret {secret['name']}, and not optional")
    return labels, ports


def check_manifests(root, tollgate, report=True):
    import kubernetes_validate

    say = print if report else (lambda *_: None)
    version = kubernetes_validate.latest_version()
    documents = load_documents(root)
    by_kind = {}
    for file, document in documents:
        by_kind.setdefault(document.get("kind"), {})[document.get("metadata", {}).get("name")] = (
            file,
            document,
        )
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            if document.get("kind") == "BackendTrafficPolicy":
                check_schema(file, "", document, BACKEND_TRAFFIC_POLICY)
            else:
                error(file, "kind", f"{document.get('kind')!r}: no schema checks it")
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(part) for part in err.path) or "-"
            error(file, path, f"Kubernetes {version}: {err.message}")
    say(f"{len(documents)} manifests against Kubernetes {version} (kubernetes-validate, strict)")

    deployments = by_kind.get("Deployment", {})
    if "tollgate" not in deployments:
        error(root, "-", "no Deployment named tollgate")
        return
    file, deployment = deployments["tollgate"]
    checked = check_deployment(file, deployment, by_kind)
    if checked is None:
        return
    labels, ports = checked
    for name, (file, service) in by_kind.get("Service", {}).items():
        selector = service["spec"].get("selector", {})
        if selector.items() <= labels.items():
            for port in service["spec"]["ports"]:
                if port["targetPort"] not in ports:
                    error(file, f"spec.ports[{port['name']}].targetPort", "not a port of tollgate's container")
    for name, (file, budget) in by_kind.get("PodDisruptionBudget", {}).items():
        if budget["spec"]["selector"].get("matchLabels", {}).items() - labels.items():
            error(file, "spec.selector", "selects no tollgate pod")
    for name, (file, scaler) in by_kind.get("HorizontalPodAutoscaler", {}).items():
        target = scaler["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) not in [("Deployment", n) for n in deployments]:
            error(file, "spec.scaleTargetRef", f"no {target['kind']} {target['name']} among the manifests")
    if "replicas" in deployment["spec"] and by_kind.get("HorizontalPodAutoscaler"):
        error(by_kind["Deployment"]["tollgate"][0], "spec.replicas", "set while an autoscaler owns the count")

    # The limits in the ConfigMap load, as `tollgate serve --config DIR` would read them.
    for name, (file, config_map) in by_kind.get("ConfigMap", {}).items():
        data = config_map.get("data", {})
        if "envoy-gateway.yaml" in data:
            gateway = yaml.safe_load(data["envoy-gateway.yaml"])
            check_schema(f"{file} data.envoy-gateway.yaml", "", gateway, ENVOY_GATEWAY)
            continue
        with tempfile.TemporaryDirectory() as directory:
            for key, text in data.items():
                pathlib.Path(directory, key).write_text(text)
            run = subprocess.run(
                [tollgate, "check-config", directory], capture_output=True, text=True, check=False
            )
            if run.returncode != 0:
                error(file, "data", f"tollgate check-config: {run.stdout}{run.stderr}".strip())
            else:
                say(f"{file}: tollgate check-config: {run.stdout.strip().replace(directory, 'data')}")


MANIFEST_MUTANTS = [
    ("a misspelt field of the Deployment", "tollgate/deployment.yaml", "readinessProbe:", "readinesProbe:"),
    ("a BackendTrafficPolicy unit out of its enum", "envoy-gateway/backend-traffic-policy.yaml", "unit: Minute", "unit: Minutes"),
    ("an EnvoyGateway field misspelt", "envoy-gateway/envoy-gateway-config.yaml", "rateLimitDeployment:", "rateLimitDeploymnt:"),
    ("a limit the config cannot parse", "tollgate/configmap.yaml", "rate: 100/s", "rate: fast"),
    ("a grace period shorter than the drain", "tollgate/deployment.yaml", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 20"),
    ("a Service port the container does not have", "tollgate/service.yaml", "targetPort: grpc", "targetPort: grcp"),
]


def check_manifest_mutants(root, tollgate):
    for description, file, before, after in MANIFEST_MUTANTS:
        with tempfile.TemporaryDirectory() as directory:
            copy_root = pathlib.Path(directory, "kubernetes")
            shutil.copytree(root, copy_root)
            target = copy_root / file
            text = target.read_text()
            if before not in text:
                error(f"{root}/{file}", "-", f"no {before!r} to break ({description})")
                continue
            target.write_text(text.replace(before, after, 1))
            found = len(ERRORS)
            check_manifests(str(copy_root), tollgate, report=False)
            caught = len(ERRORS) > found
            del ERRORS[found:]
            if not caught:
                error(f"{root}/{file}", "-", f"the checks pass with {description}")
    print(f"{len(MANIFEST_MUTANTS)} broken copies of the manifests, each caught")


# --- Alerts -----------------------------------------------------------------------------------


def check_alerts(rules_file, tests_file):
    rules = yaml.safe_load(pathlib.Path(rules_file).read_text())
    tests = yaml.safe_load(pathlib.Path(tests_file).read_text())
    alerts = {}
    for group in rules.get("groups", []):
        for index, rule in enumerate(group.get("rules", [])):
            if "alert" not in rule:
                continue
            at = f"groups[{group['name']}].rules[{index}]"
            alerts[rule["alert"]] = at
            if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                error(rules_file, f"{at}.labels.severity", "expected critical, warning or info")
            for key in ("summary", "description"):
                if not rule.get("annotations", {}).get(key):
                    error(rules_file, f"{at}.annotations.{key}", "missing")
    if not alerts:
        error(rules_file, "groups", "no alert")
    fired, silent = set(), set()
    for test in tests.get("tests", []):
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    for name in sorted(alerts):
        if name not in fired:
            error(tests_file, "tests", f"no case fires {name}")
        if name not in silent:
            error(tests_file, "tests", f"no case keeps {name} silent")
    for name in sorted((fired | silent) - alerts.keys()):
        error(tests_file, "tests", f"{name} is not an alert of {rules_file}")
    print(f"{len(alerts)} alerts, each with a firing and a silent case")


def alert_mutants(rules):
    """(description, rules) for each broken copy of `rules`: one alert's thresholds moved up by
    one, or its `for` dropped."""
    for group_index, group in enumerate(rules["groups"]):
        for rule_index, rule in enumerate(group["rules"]):
            name = rule.get("alert")
            if not name:
                continue
            thresholds = re.compile(r"(==|!=|>=|<=|>|<)(\s*)(\d+)")
            if thresholds.search(rule["expr"]):
                mutant = copy.deepcopy(rules)
                mutant["groups"][group_index]["rules"][rule_index]["expr"] = thresholds.sub(
                    lambda m: f"{m.group(1)}{m.group(2)}{int(m.group(3)) + 1}", rule["expr"]
                )
                yield f"{name} with its threshold moved up by one", mutant
            else:
                error("alerts", name, "no numeric threshold to check")
            if "for" in rule:
                mutant = copy.deepcopy(rules)
                del mutant["groups"][group_index]["rules"][rule_index]["for"]
                yield f"{name} without its `for`", mutant


def check_mutants(rules_file, tests_file, promtool):
    rules = yaml.safe_load(pathlib.Path(rules_file).read_text())
    tests = yaml.safe_load(pathlib.Path(tests_file).read_text())
    count = 0
    with tempfile.TemporaryDirectory() as directory:
        tests["rule_files"] = ["mutant.yaml"]
        test_copy = pathlib.Path(directory, "tests.yaml")
        test_copy.write_text(yaml.safe_dump(tests))
        for description, mutant in alert_mutants(rules):
            count += 1
            pathlib.Path(directory, "mutant.yaml").write_text(yaml.safe_dump(mutant))
            run = subprocess.run(
                [promtool, "test", "rules", str(test_copy)], capture_output=True, text=True, check=False
            )
            if run.returncode == 0:
                error(tests_file, "tests", f"still pass with {description}")
    print(f"{count} broken copies of the alerts, each caught by the unit tests")


# --- Image ------------------------------------------------------------------------------------


def check_image(inspect_file):
    image = json.loads(pathlib.Path(inspect_file).read_text())
    config = image.get("Docker", {}).get("config") or image["OCIv1"]["config"]
    where = f"{inspect_file} (the Dockerfile's final stage)"
    user = config.get("User", "")
    if user.split(":")[0] in ("", "0", "root"):
        error(where, "USER", f"runs as root ({user!r})")
    if config.get("Entrypoint") != ["/usr/local/bin/tollgate"]:
        error(where, "ENTRYPOINT", f"expected /usr/local/bin/tollgate, got {config.get('Entrypoint')}")
    exposed = sorted(config.get("ExposedPorts", {}))
    if exposed != ["8080/tcp", "8081/tcp"]:
        error(where, "EXPOSE", f"expected 8080 and 8081, got {exposed}")
    print(f"user {user}")
    print("env " + " ".join(config.get("Env", [])))
    print("command " + " ".join(config.get("Entrypoint", []) + (config.get("Cmd") or [])))


def main(argv):
    commands = {
        "manifests": (check_manifests, 2),
        "manifest-mutants": (check_manifest_mutants, 2),
        "alerts": (check_alerts, 2),
        "mutants": (check_mutants, 3),
        "image": (check_image, 1),
    }
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 != commands[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    function, _ = commands[argv[1]]
    function(*argv[2:])
    for line in ERRORS:
        print(line, file=sys.stderr)
    return 1 if ERRORS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

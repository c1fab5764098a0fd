"""The shipped TidalScheduler manifests (infra/tidal-scheduler; oFEP-0033 §1, §6, §8).

Every manifest is a valid Kubernetes object for the oldest and the newest API versions we claim
(kubernetes-validate, strict: an unknown or misplaced field fails). The CRD holds exactly the
oFEP's spec and status fields. An object is checked the way the API server checks it: first the
structural schema (types, required fields, bounds; jsonschema), then each CEL rule
(``x-kubernetes-validations``, run with common-expression-language as the emulator does) against
the value at its schema node, only where that value is present. The example passes both; each
invalid object is refused by exactly the rule meant for it. The RBAC grants exactly oFEP §8's list,
and writes to ``/scale`` only in the opt-in scale mode's file.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import cel
import jsonschema
import kubernetes_validate
import pytest
import yaml

from falcon.domain.cron import parse_cron
from falcon.domain.tidal import Condition, TidalStatus

INFRA = Path(__file__).resolve().parents[2] / "infra" / "tidal-scheduler"
MANIFESTS = ("crd.yaml", "rbac.yaml", "rbac-scale.yaml")
# The oldest API whose validation rules have `reason`, and the newest the library ships.
KUBERNETES_VERSIONS = ("1.28", kubernetes_validate.utils.latest_version())

Json = dict[str, Any]


@cache
def documents(name: str) -> tuple[Json, ...]:
    """The parsed file, read once; tests change only their own deep copies."""
    return tuple(yaml.safe_load_all((INFRA / name).read_text()))


def crd() -> Json:
    (definition,) = documents("crd.yaml")
    return definition


def version() -> Json:
    (served,) = crd()["spec"]["versions"]
    return served


def root_schema() -> Json:
    schema: Json = version()["schema"]["openAPIV3Schema"]
    return schema


def example() -> Json:
    (obj,) = documents("example.yaml")
    return obj


# -- the API server's two checks of a custom object ---------------------------------------------------
def schema_errors(obj: Json) -> list[tuple[str, str]]:
    """(path, JSON-schema keyword) of each structural refusal; x-kubernetes-* keys are ignored here."""
    validator = jsonschema.Draft7Validator(root_schema())
    return sorted(
        (_dotted(error.absolute_path), str(error.validator)) for error in validator.iter_errors(obj)
    )


def _dotted(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def cel_refusals(schema: Json, value: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, message) of each CEL rule that does not hold, walking the value along its schema."""
    refusals = [
        (path, rule["message"])
        for rule in schema.get("x-kubernetes-validations", [])
        if cel.evaluate(rule["rule"], {"self": value}) is not True
    ]
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if key in value:
                refusals += cel_refusals(child, value[key], f"{path}.{key}" if path else key)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            refusals += cel_refusals(schema["items"], item, f"{path}[{index}]")
    return refusals


def schema_nodes(schema: Json, path: str = "") -> Iterator[tuple[str, Json]]:
    """Every node of a schema with its field path; an array's items are at ``path[]``."""
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{key}" if path else key)
    if "items" in schema:
        yield from schema_nodes(schema["items"], f"{path}[]")


def field_types(schema: Json) -> dict[str, str]:
    return {path: node["type"] for path, node in schema_nodes(schema) if path}


# -- every manifest is a Kubernetes object --------------------------------------------------------------
@pytest.mark.parametrize("kubernetes", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_is_a_valid_kubernetes_object(name: str, kubernetes: str) -> None:
    for document in documents(name):
        kubernetes_validate.validate(document, kubernetes, strict=True)


def test_example_is_an_object_of_the_crd_accepted_by_schema_and_rules() -> None:
    obj, definition = example(), crd()
    assert obj["apiVersion"] == f"{definition['spec']['group']}/{version()['name']}"
    assert obj["kind"] == definition["spec"]["names"]["kind"]
    assert schema_errors(obj) == []
    assert cel_refusals(root_schema(), obj) == []


def test_example_crons_parse_with_the_controllers_engine() -> None:
    for rule in example()["spec"]["triggers"]["times"]["rules"]:
        parse_cron(rule["cron"])


# -- the CRD is the oFEP's ------------------------------------------------------------------------------
OFEP_SPEC = {
    "targetRef": "object",
    "targetRef.apiVersion": "string",
    "targetRef.kind": "string",
    "targetRef.name": "string",
    "targetRef.namespace": "string",
    "triggers": "object",
    "triggers.times": "object",
    "triggers.times.rules": "array",
    "triggers.times.rules[]": "object",
    "triggers.times.rules[].name": "string",
    "triggers.times.rules[].cron": "string",
    "triggers.times.rules[].replicas": "integer",
    "triggers.times.rules[].description": "string",
}
OFEP_STATUS = {
    "desiredReplicas": "integer",
    "activeRule": "string",
    "lastTriggerTime": "string",
    "lastTriggeredRule": "string",
    "nextTriggerTime": "string",
    "nextTriggerRule": "string",
    "conditions": "array",
    "conditions[]": "object",
    "conditions[].type": "string",
    "conditions[].status": "string",
    "conditions[].lastTransitionTime": "string",
    "conditions[].reason": "string",
    "conditions[].message": "string",
}
# Beyond the oFEP: the generation status was computed from, and metav1.Condition's own field.
ADDED_STATUS = {"observedGeneration": "integer", "conditions[].observedGeneration": "integer"}


def test_crd_names_scope_and_version() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == "tidalschedulers.scheduling.tidal.io"
    assert (spec["group"], spec["scope"]) == ("scheduling.tidal.io", "Namespaced")
    assert (spec["names"]["kind"], spec["names"]["plural"]) == ("TidalScheduler", "tidalschedulers")
    assert (version()["name"], version()["served"], version()["storage"]) == ("v1alpha1", True, True)
    assert version()["subresources"] == {"status": {}}


def test_spec_and_status_are_the_ofeps_fields() -> None:
    properties = root_schema()["properties"]
    assert field_types(properties["spec"]) == OFEP_SPEC
    assert field_types(properties["status"]) == OFEP_STATUS | ADDED_STATUS


def test_required_fields_are_the_ofeps() -> None:
    spec = root_schema()["properties"]["spec"]
    assert set(spec["required"]) == {"targetRef", "triggers"}
    assert set(spec["properties"]["targetRef"]["required"]) == {"apiVersion", "kind", "name", "namespace"}
    rules = spec["properties"]["triggers"]["properties"]["times"]["properties"]["rules"]
    assert set(rules["items"]["required"]) == {"name", "cron", "replicas"}  # description is optional


def test_the_controllers_status_is_kept_whole_by_the_schema() -> None:
    """A field the schema lacks would be pruned by the API server without a word."""
    ready = Condition(
        "Ready", "True", "2026-03-09T01:00:00Z", "TriggerActive", "Time-based trigger is active"
    )
    status = TidalStatus(
        desired_replicas=20,
        active_rule="morning-base",
        last_trigger_time="2026-03-09T00:00:00Z",
        last_triggered_rule="morning-base",
        next_trigger_time="2026-03-09T06:00:00Z",
        next_trigger_rule="afternoon-peak",
        conditions=(ready,),
        observed_generation=3,
    ).to_dict()
    assert set(status) == set(root_schema()["properties"]["status"]["properties"])
    assert schema_errors(example() | {"status": status}) == []


def test_printer_columns_read_schema_fields() -> None:
    columns = {column["name"]: column for column in version()["additionalPrinterColumns"]}
    assert {"Desired", "Active Rule", "Next Trigger", "Ready", "Age"} <= set(columns)
    fields = {f".{path}" for path, _ in schema_nodes(root_schema()) if path}
    for column in columns.values():
        path = column["jsonPath"].split("[?", 1)[0]
        assert path in fields or path == ".metadata.creationTimestamp", column


# oFEP §6's CEL rules, by the field each guards.
OFEP_CEL_FIELDS = {
    "spec.targetRef.apiVersion",
    "spec.targetRef.kind",
    "spec.targetRef.name",
    "spec.targetRef.namespace",
    "spec.triggers.times.rules",
    "spec.triggers.times.rules[].name",
    "spec.triggers.times.rules[].cron",
    "spec.triggers.times.rules[].replicas",
}


def test_cel_rules_are_the_ofeps_compile_and_read_only_self() -> None:
    guarded = {
        path: node["x-kubernetes-validations"]
        for path, node in schema_nodes(root_schema())
        if "x-kubernetes-validations" in node
    }
    assert set(guarded) == OFEP_CEL_FIELDS
    for path, rules in guarded.items():
        (rule,) = rules
        assert cel.compile(rule["rule"]).variables() == ["self"], path
        assert "\n" not in rule["message"], path  # the API server refuses a message with a line break


def test_cel_rules_sit_under_bounded_lists_and_strings() -> None:
    """The API server refuses a CRD whose rules' estimated cost is over budget; unbounded sizes blow it."""
    nodes = dict(schema_nodes(root_schema()))
    lists = [path for path, node in nodes.items() if node["type"] == "array"]
    for path, node in nodes.items():
        if node.get("x-kubernetes-validations"):
            assert node["type"] != "string" or "maxLength" in node, path
            assert all("maxItems" in nodes[outer] for outer in lists if path.startswith(outer)), path


# -- invalid objects: each refused by its rule ------------------------------------------------------------
def edit(change: Callable[[Json], None]) -> Json:
    obj = copy.deepcopy(example())
    change(obj["spec"])
    return obj


def rules_of(spec: Json) -> list[Json]:
    rules: list[Json] = spec["triggers"]["times"]["rules"]
    return rules


def set_target(field: str, value: Any) -> Callable[[Json], None]:
    return lambda spec: spec["targetRef"].__setitem__(field, value)


def set_rule(index: int, field: str, value: Any) -> Callable[[Json], None]:
    return lambda spec: rules_of(spec)[index].__setitem__(field, value)


def drop_target_field(field: str) -> Callable[[Json], None]:
    return lambda spec: spec["targetRef"].pop(field)


def drop_rule_field(index: int, field: str) -> Callable[[Json], None]:
    return lambda spec: rules_of(spec)[index].pop(field)


CRON_MESSAGE = (
    "cron must start with CRON_TZ=<IANA zone> and a space, then the schedule, "
    "e.g. 'CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5'"
)
CEL_CASES = [
    *[
        pytest.param(
            set_target(f, ""),
            f"spec.targetRef.{f}",
            f"targetRef.{f} must not be empty",
            id=f"empty targetRef.{f}",
        )
        for f in ("apiVersion", "kind", "name", "namespace")
    ],
    pytest.param(
        lambda spec: rules_of(spec).clear(),
        "spec.triggers.times.rules",
        "triggers.times.rules must hold at least one rule",
        id="no rule",
    ),
    pytest.param(
        set_rule(1, "name", ""),
        "spec.triggers.times.rules[1].name",
        "rule name must not be empty",
        id="empty name",
    ),
    *[
        pytest.param(
            set_rule(2, "cron", cron), "spec.triggers.times.rules[2].cron", CRON_MESSAGE, id=repr(cron)
        )
        for cron in (
            "0 0 8 * * *",
            "TZ=Asia/Shanghai 0 0 8 * * *",
            "CRON_TZ=Asia/Shanghai",
            "CRON_TZ= 0 0 8 * * *",
            " CRON_TZ=Asia/Shanghai 0 0 8 * * *",
            "cron_tz=Asia/Shanghai 0 0 8 * * *",
        )
    ],
    *[
        pytest.param(
            set_rule(0, "replicas", n),
            "spec.triggers.times.rules[0].replicas",
            "replicas must be a positive integer",
            id=f"replicas {n}",
        )
        for n in (0, -3)
    ],
]


@pytest.mark.parametrize(("change", "path", "message"), CEL_CASES)
def test_invalid_object_is_refused_by_its_cel_rule(
    change: Callable[[Json], None], path: str, message: str
) -> None:
    obj = edit(change)
    assert schema_errors(obj) == []  # the refusal is the rule's alone
    assert cel_refusals(root_schema(), obj) == [(path, message)]


@pytest.mark.parametrize(
    "cron",
    [
        "CRON_TZ=UTC @daily",
        "CRON_TZ=Etc/GMT+8 @every 1h30m",
        "CRON_TZ=America/Argentina/Buenos_Aires 0 * * * * ?",
    ],
)
def test_cron_rule_accepts_zones_and_descriptors(cron: str) -> None:
    obj = edit(set_rule(0, "cron", cron))
    assert cel_refusals(root_schema(), obj) == []


SCHEMA_CASES = [
    *[
        pytest.param(drop_target_field(f), ("spec.targetRef", "required"), id=f"no targetRef.{f}")
        for f in ("apiVersion", "kind", "name", "namespace")
    ],
    *[
        pytest.param(drop_rule_field(0, f), ("spec.triggers.times.rules[0]", "required"), id=f"no rule {f}")
        for f in ("name", "cron", "replicas")
    ],
    pytest.param(lambda spec: spec.pop("triggers"), ("spec", "required"), id="no triggers"),
    pytest.param(
        lambda spec: spec["triggers"]["times"].pop("rules"),
        ("spec.triggers.times", "required"),
        id="no rules",
    ),
    pytest.param(
        set_rule(0, "replicas", 2.5), ("spec.triggers.times.rules[0].replicas", "type"), id="2.5 replicas"
    ),
    pytest.param(
        set_rule(0, "replicas", "3"), ("spec.triggers.times.rules[0].replicas", "type"), id="'3' replicas"
    ),
    pytest.param(
        set_rule(0, "cron", "CRON_TZ=UTC " + "0 " * 200),
        ("spec.triggers.times.rules[0].cron", "maxLength"),
        id="long",
    ),
    pytest.param(
        lambda spec: rules_of(spec).extend([rules_of(spec)[0]] * 1000),
        ("spec.triggers.times.rules", "maxItems"),
        id="1003 rules",
    ),
]


@pytest.mark.parametrize(("change", "refusal"), SCHEMA_CASES)
def test_invalid_object_is_refused_by_the_structural_schema(
    change: Callable[[Json], None], refusal: tuple[str, str]
) -> None:
    assert schema_errors(edit(change)) == [refusal]


# -- RBAC: oFEP §8, and /scale only for the scale mode -----------------------------------------------------
OFEP_GRANTS = {
    *(
        ("scheduling.tidal.io", "tidalschedulers", verb)
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
    ),
    *(("scheduling.tidal.io", "tidalschedulers/status", verb) for verb in ("get", "update", "patch")),
    ("scheduling.tidal.io", "tidalschedulers/finalizers", "update"),
    *(
        ("apps", kind, verb)
        for kind in ("deployments", "statefulsets", "daemonsets")
        for verb in ("get", "list", "watch")
    ),
    ("*", "*", "get"),
}
SCALE_GRANTS = {
    ("apps", f"{kind}/scale", verb)
    for kind in ("deployments", "statefulsets")
    for verb in ("get", "update", "patch")
}


def grants(role: Json) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def role_and_binding(name: str) -> tuple[Json, Json]:
    by_kind = {document["kind"]: document for document in documents(name)}
    assert set(by_kind) == {"ClusterRole", "ClusterRoleBinding"}
    return by_kind["ClusterRole"], by_kind["ClusterRoleBinding"]


@pytest.mark.parametrize(
    ("name", "expected"), [("rbac.yaml", OFEP_GRANTS), ("rbac-scale.yaml", SCALE_GRANTS)]
)
def test_role_grants_exactly(name: str, expected: set[tuple[str, str, str]]) -> None:
    role, binding = role_and_binding(name)
    assert grants(role) == expected
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }


def test_scale_is_granted_only_by_the_scale_mode_file() -> None:
    (base, _), (scale, _) = role_and_binding("rbac.yaml"), role_and_binding("rbac-scale.yaml")
    assert not any(resource.endswith("/scale") for _, resource, _ in grants(base))
    assert all(resource.endswith("/scale") for _, resource, _ in grants(scale))


def test_both_bindings_name_the_google_service_account_as_a_user() -> None:
    subjects = [role_and_binding(name)[1]["subjects"] for name in ("rbac.yaml", "rbac-scale.yaml")]
    assert subjects[0] == subjects[1]
    (subject,) = subjects[0]
    assert (subject["kind"], subject["apiGroup"]) == ("User", "rbac.authorization.k8s.io")
    assert subject["name"].endswith(".iam.gserviceaccount.com")

"""CustomResourceDefinitions and custom objects, through the official client's ApiextensionsV1Api and
CustomObjectsApi: CRD validation, structural-schema pruning/defaulting/validation, CEL rules, the status
subresource, generation, watch, list and the delete cascade."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from emu_helpers import Kube, wait_for
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "emu.example.com", "v1", "widgets"


def _rule(rule: str, **extra: str) -> dict[str, str]:
    return {"rule": rule, **extra}


RULES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "required": ["name", "cron", "replicas"],
        "x-kubernetes-validations": [
            _rule("self.name.matches('^[a-z-]+$')", message="rule names are lowercase")
        ],
        "properties": {
            "name": {"type": "string"},
            "cron": {"type": "string"},
            "replicas": {"type": "integer"},
        },
    },
}
SPEC_RULES = [
    _rule(
        "has(self.target) && size(self.target.name) > 0",
        message="target.name is required",
        fieldPath=".target",
    ),
    _rule(
        "self.rules.all(r, r.cron.startsWith('CRON_TZ='))",
        messageExpression="'every cron needs CRON_TZ=, ' + string(size(self.rules)) + ' rules checked'",
        reason="FieldValueForbidden",
    ),
    _rule(
        "self.rules.exists(r, r.replicas > 0)", message="some rule must scale up", reason="FieldValueRequired"
    ),
]
WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size", "rules"],
            "x-kubernetes-validations": SPEC_RULES,
            "properties": {
                "size": {"type": "integer", "format": "int32", "minimum": 1},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                "target": {"type": "object", "properties": {"name": {"type": "string"}}},
                "label": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2},
                "note": {"type": "string", "nullable": True},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "key": {
                    "type": "string",
                    "x-kubernetes-validations": [_rule("self == oldSelf", message="key is immutable")],
                },
                "rules": RULES_SCHEMA,
            },
        },
        "status": {
            "type": "object",
            "properties": {"desiredReplicas": {"type": "integer"}, "phase": {"type": "string"}},
        },
    },
}


def crd_body(
    plural: str = PLURAL,
    kind: str = "Widget",
    schema: dict[str, Any] | None = None,
    scope: str = "Namespaced",
    name: str | None = None,
    status: bool = True,
) -> dict[str, Any]:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": copy.deepcopy(schema or WIDGET_SCHEMA)},
        "subresources": {"status": {}} if status else {},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name or f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": plural, "kind": kind},
            "versions": [version],
        },
    }


def widget(name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "size": 3,
        "target": {"name": "web"},
        "rules": [{"name": "morning", "cron": "CRON_TZ=UTC 0 0 8 * * *", "replicas": 2}],
        "key": "k1",
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name}, "spec": body}


@pytest.fixture(scope="module")
def kube(kube_for: Callable[[str], Kube]) -> Iterator[Kube]:
    """Cluster 'raw' with the Widget CRD installed."""
    kube = kube_for("raw")
    extensions = k8s.ApiextensionsV1Api(kube.api)
    extensions.create_custom_resource_definition(crd_body())
    yield kube
    extensions.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")


@pytest.fixture
def custom(kube: Kube) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(kube.api)


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = f"c-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    kube.core.delete_namespace(name)


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as error:
        call()
    assert error.value.status == 422
    status: dict[str, Any] = json.loads(error.value.body)
    assert (status["kind"], status["reason"]) == ("Status", "Invalid")
    return status


def causes(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["field"], c["reason"], c["message"]) for c in status["details"]["causes"]]


def test_crd_is_established_and_its_resource_discoverable(kube: Kube) -> None:
    crd = k8s.ApiextensionsV1Api(kube.api).read_custom_resource_definition(f"{PLURAL}.{GROUP}")
    assert {c.type: c.status for c in crd.status.conditions} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    assert crd.status.accepted_names.list_kind == "WidgetList" and crd.status.stored_versions == [VERSION]
    groups = k8s.ApisApi(kube.api).get_api_versions().groups
    assert f"{GROUP}/{VERSION}" in [v.group_version for g in groups if g.name == GROUP for v in g.versions]
    resources = k8s.CustomObjectsApi(kube.api).get_api_resources(GROUP, VERSION).resources
    assert {(r.name, r.namespaced) for r in resources} >= {(PLURAL, True), (f"{PLURAL}/status", True)}


def _without_type(schema: dict[str, Any]) -> dict[str, Any]:
    broken = copy.deepcopy(schema)
    del broken["properties"]["spec"]["properties"]["rules"]["items"]["type"]
    return broken


def _with_spec_rule(rule: dict[str, str]) -> dict[str, Any]:
    schema = copy.deepcopy(WIDGET_SCHEMA)
    schema["properties"]["spec"]["x-kubernetes-validations"] = [rule]
    return schema


SPEC_RULE_PATH = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0]"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (crd_body(name="wrong.emu.example.com"), "metadata.name", 'must be spec.names.plural+"."+spec.group'),
        (crd_body(scope="Global"), "spec.scope", 'Unsupported value: "Global"'),
        (
            crd_body(schema=_without_type(WIDGET_SCHEMA)),
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[rules].items.type",
            "must not be empty for specified object fields",
        ),
        (crd_body(schema=_with_spec_rule(_rule("self.size >"))), f"{SPEC_RULE_PATH}.rule", "Syntax error"),
        (
            crd_body(schema=_with_spec_rule(_rule("nosuch(self.size)"))),
            f"{SPEC_RULE_PATH}.rule",
            "undeclared reference to 'nosuch'",
        ),
        (
            crd_body(schema=_with_spec_rule(_rule("self.label.split('-').size() > 1"))),
            f"{SPEC_RULE_PATH}.rule",
            "'split' is not supported by the emulator's CEL",
        ),
        (crd_body(schema=_with_spec_rule(_rule("self.size > limit"))), f"{SPEC_RULE_PATH}.rule", "'limit'"),
        (
            crd_body(schema=_with_spec_rule(_rule("true", messageExpression="'a' +"))),
            f"{SPEC_RULE_PATH}.messageExpression",
            "compilation failed",
        ),
        (
            crd_body(schema=_with_spec_rule(_rule("true", fieldPath=".nothing"))),
            f"{SPEC_RULE_PATH}.fieldPath",
            "fieldPath must be a valid path",
        ),
        (
            crd_body(schema=_with_spec_rule(_rule("true", reason="Bad"))),
            f"{SPEC_RULE_PATH}.reason",
            'Unsupported value: "Bad"',
        ),
    ],
)
def test_crd_refused_like_the_api_server(kube: Kube, body: dict[str, Any], field: str, words: str) -> None:
    body["metadata"]["name"] = body["metadata"]["name"].replace(PLURAL, "refused")
    body["spec"]["names"]["plural"] = "refused"
    status = refusal(lambda: k8s.ApiextensionsV1Api(kube.api).create_custom_resource_definition(body))
    assert status["message"].startswith('CustomResourceDefinition.apiextensions.k8s.io "')
    assert [c for c in causes(status) if c[0] == field and words in c[2]], causes(status)


def test_crd_with_two_storage_versions_is_refused(kube: Kube) -> None:
    body = crd_body(plural="twostores")
    body["spec"]["versions"].append(dict(body["spec"]["versions"][0], name="v2"))
    status = refusal(lambda: k8s.ApiextensionsV1Api(kube.api).create_custom_resource_definition(body))
    assert causes(status) == [
        (
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: 2: must have exactly one version marked as storage version",
        )
    ]


def test_create_prunes_unknown_fields_defaults_and_ignores_status(
    custom: k8s.CustomObjectsApi, ns: str
) -> None:
    body = widget("pruned", bogus=1, extra={"anything": {"kept": True}}, note=None, label=None)
    body["status"] = {"desiredReplicas": 9}
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    assert (
        "bogus" not in created["spec"] and "label" not in created["spec"] and created["spec"]["note"] is None
    )
    assert created["spec"]["extra"] == {"anything": {"kept": True}} and created["spec"]["mode"] == "slow"
    assert "status" not in created and created["metadata"]["generation"] == 1
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pruned") == created


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        (
            {"size": "3"},
            (
                "spec.size",
                "FieldValueTypeInvalid",
                'Invalid value: "string": spec.size in body must be of type integer: "string"',
            ),
        ),
        (
            {"size": 0},
            (
                "spec.size",
                "FieldValueInvalid",
                "Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ),
        ),
        (
            {"size": 2**31},
            (
                "spec.size",
                "FieldValueInvalid",
                "Invalid value: 2147483648: spec.size in body must be of type int32: 2147483648",
            ),
        ),
        (
            {"mode": "warp"},
            (
                "spec.mode",
                "FieldValueNotSupported",
                'Unsupported value: "warp": supported values: "fast", "slow"',
            ),
        ),
        (
            {"label": "Up"},
            (
                "spec.label",
                "FieldValueInvalid",
                "Invalid value: \"Up\": spec.label in body should match '^[a-z]+$'",
            ),
        ),
        (
            {"label": "a"},
            (
                "spec.label",
                "FieldValueInvalid",
                'Invalid value: "a": spec.label in body should be at least 2 chars long',
            ),
        ),
        (
            {"rules": []},
            (
                "spec.rules",
                "FieldValueInvalid",
                "Invalid value: 0: spec.rules in body should have at least 1 items",
            ),
        ),
        (
            {"rules": [{"name": "x", "replicas": 1}]},
            ("spec.rules[0].cron", "FieldValueRequired", "Required value"),
        ),
    ],
)
def test_schema_refusals_name_the_field(
    custom: k8s.CustomObjectsApi, ns: str, spec: dict[str, Any], cause: tuple[str, str, str]
) -> None:
    status = refusal(
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("bad", **spec))
    )
    assert causes(status) == [cause]
    assert status["message"] == f'Widget.{GROUP} "bad" is invalid: {cause[0]}: {cause[2]}'


def test_object_name_must_be_a_dns_subdomain(custom: k8s.CustomObjectsApi, ns: str) -> None:
    status = refusal(
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("Not_OK"))
    )
    [(field, reason, message)] = causes(status)
    assert (field, reason) == ("metadata.name", "FieldValueInvalid")
    assert message.startswith('Invalid value: "Not_OK": a lowercase RFC 1123 subdomain')


def test_missing_required_field_is_named(custom: k8s.CustomObjectsApi, ns: str) -> None:
    body = widget("nosize")
    del body["spec"]["size"]
    status = refusal(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))
    assert causes(status) == [("spec.size", "FieldValueRequired", "Required value")]


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        (
            {"target": {"name": ""}},
            ("spec.target", "FieldValueInvalid", 'Invalid value: "object": target.name is required'),
        ),
        (
            {"rules": [{"name": "a", "cron": "0 0 8 * * *", "replicas": 2}]},
            ("spec", "FieldValueForbidden", "Forbidden: every cron needs CRON_TZ=, 1 rules checked"),
        ),
        (
            {"rules": [{"name": "a", "cron": "CRON_TZ=UTC @daily", "replicas": 0}]},
            ("spec", "FieldValueRequired", "Required value: some rule must scale up"),
        ),
        (
            {"rules": [{"name": "Upper", "cron": "CRON_TZ=UTC @daily", "replicas": 1}]},
            ("spec.rules[0]", "FieldValueInvalid", 'Invalid value: "object": rule names are lowercase'),
        ),
    ],
)
def test_cel_rules_refuse_with_message_reason_and_field_path(
    custom: k8s.CustomObjectsApi, ns: str, spec: dict[str, Any], cause: tuple[str, str, str]
) -> None:
    status = refusal(
        lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("bad", **spec))
    )
    assert causes(status) == [cause]


def test_rule_without_message_reports_the_rule(kube: Kube, ns: str) -> None:
    schema = _with_spec_rule(_rule("self.size < 10"))
    k8s.ApiextensionsV1Api(kube.api).create_custom_resource_definition(crd_body("plains", "Plain", schema))
    custom = k8s.CustomObjectsApi(kube.api)
    body = dict(widget("big", size=12), kind="Plain")
    status = refusal(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, "plains", body))
    assert causes(status) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": failed rule: self.size < 10')
    ]
    k8s.ApiextensionsV1Api(kube.api).delete_custom_resource_definition(f"plains.{GROUP}")


def test_transition_rule_compares_with_the_stored_object(custom: k8s.CustomObjectsApi, ns: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("keyed"))
    patch = {"spec": {"key": "k2"}}
    status = refusal(
        lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "keyed", patch)
    )
    assert causes(status) == [("spec.key", "FieldValueInvalid", 'Invalid value: "string": key is immutable')]
    updated = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "keyed", {"spec": {"size": 4}}
    )
    assert (updated["spec"]["size"], updated["spec"]["key"]) == (4, "k1")


def test_status_subresource_and_generation(custom: k8s.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("gen"))
    status_patch = {"status": {"desiredReplicas": 2, "phase": "Active"}, "spec": {"size": 7}}
    with_status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "gen", status_patch
    )
    assert (
        with_status["status"] == {"desiredReplicas": 2, "phase": "Active"}
        and with_status["spec"]["size"] == 3
    )
    assert with_status["metadata"]["generation"] == 1
    assert int(with_status["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    main_patch = {"spec": {"size": 5}, "status": {"phase": "Ignored"}}
    changed = custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "gen", main_patch)
    assert changed["spec"]["size"] == 5 and changed["status"]["phase"] == "Active"
    assert changed["metadata"]["generation"] == 2
    relabelled = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "gen", {"metadata": {"labels": {"a": "b"}}}
    )
    assert relabelled["metadata"]["generation"] == 2
    bad_status = {"status": {"desiredReplicas": "two"}}
    refusal(
        lambda: custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "gen", bad_status)
    )


def test_without_status_subresource_status_is_spec_like(kube: Kube, ns: str) -> None:
    extensions, custom = k8s.ApiextensionsV1Api(kube.api), k8s.CustomObjectsApi(kube.api)
    extensions.create_custom_resource_definition(crd_body("plains", "Plain", status=False))
    body = dict(widget("plain"), kind="Plain", status={"phase": "Born"})
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, "plains", body)
    assert created["status"] == {"phase": "Born"}
    with pytest.raises(ApiException) as no_status:
        custom.get_namespaced_custom_object_status(GROUP, VERSION, ns, "plains", "plain")
    assert no_status.value.status == 404
    changed = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "plains", "plain", {"status": {"phase": "Up"}}
    )
    assert changed["status"] == {"phase": "Up"} and changed["metadata"]["generation"] == 2
    extensions.delete_custom_resource_definition(f"plains.{GROUP}")


def test_crd_update_tightens_validation_and_unchanged_values_ratchet(kube: Kube, ns: str) -> None:
    extensions, custom = k8s.ApiextensionsV1Api(kube.api), k8s.CustomObjectsApi(kube.api)
    extensions.create_custom_resource_definition(crd_body("tights", "Tight"))
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, "tights", dict(widget("t", size=3), kind="Tight")
    )
    crd = extensions.read_custom_resource_definition(f"tights.{GROUP}")
    crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties["size"].minimum = 10
    updated = extensions.replace_custom_resource_definition(f"tights.{GROUP}", crd)
    assert updated.metadata.generation == 2
    status = {"status": {"phase": "Old"}}
    assert custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "tights", "t", status)["status"]
    label = {"metadata": {"labels": {"a": "b"}}}
    assert (
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "tights", "t", label)["spec"]["size"] == 3
    )
    refused = refusal(
        lambda: custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "tights", "t", {"spec": {"size": 4}}
        )
    )
    assert [c[0] for c in causes(refused)] == ["spec.size"]
    extensions.delete_custom_resource_definition(f"tights.{GROUP}")


def test_replace_with_a_stale_resource_version_conflicts(custom: k8s.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("stale"))
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "stale", {"spec": {"size": 4}})
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "stale", created)
    assert conflict.value.status == 409


def test_json_patch_applies_and_strategic_merge_is_unsupported(
    kube: Kube, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, widget("patched"))
    ops = [{"op": "replace", "path": "/spec/size", "value": 6}]
    assert (
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "patched", ops)["spec"]["size"] == 6
    )
    url = f"{kube.api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/patched"
    headers = {"Content-Type": "application/strategic-merge-patch+json"}
    request = urllib.request.Request(url, b'{"spec": {"size": 2}}', headers, method="PATCH")
    with pytest.raises(urllib.error.HTTPError) as unsupported:
        urllib.request.urlopen(request)
    assert unsupported.value.code == 415


def test_watch_list_across_namespaces_and_label_selectors(
    kube: Kube, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    start = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["metadata"]["resourceVersion"]
    labelled = widget("watched")
    labelled["metadata"]["labels"] = {"tier": "gold"}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, labelled)
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "watched", {"status": {"phase": "Up"}}
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "watched")
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        ns,
        PLURAL,
        resource_version=start,
        timeout_seconds=5,
    )
    events = [
        (e["type"], e["object"]) for e in itertools.islice(stream, 3)
    ]  # DELETED is the last there can be
    assert [kind for kind, _ in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1][1]["status"] == {"phase": "Up"}
    other = f"{ns}-b"
    kube.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    for namespace, tier in ((ns, "gold"), (other, "gold"), (other, "tin")):
        body = widget(f"w-{tier}")
        body["metadata"]["labels"] = {"tier": tier}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    gold = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="tier=gold")["items"]
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in gold) == [
        (ns, "w-gold"),
        (other, "w-gold"),
    ]
    kube.core.delete_namespace(other)
    assert custom.list_namespaced_custom_object(GROUP, VERSION, other, PLURAL)["items"] == []


def test_deleting_the_crd_deletes_its_objects_ends_its_watches_and_stops_serving(kube: Kube) -> None:
    extensions, custom = k8s.ApiextensionsV1Api(kube.api), k8s.CustomObjectsApi(kube.api)
    extensions.create_custom_resource_definition(crd_body("gadgets", "Gadget", scope="Cluster"))
    custom.create_cluster_custom_object(GROUP, VERSION, "gadgets", dict(widget("g1"), kind="Gadget"))
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        for event in watch.Watch().stream(
            custom.list_cluster_custom_object, GROUP, VERSION, "gadgets", timeout_seconds=5
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    thread = threading.Thread(target=consume)
    thread.start()
    wait_for(lambda: seen)
    extensions.delete_custom_resource_definition(f"gadgets.{GROUP}")
    thread.join(timeout=2)
    assert not thread.is_alive() and seen == [("ADDED", "g1"), ("DELETED", "g1")]
    with pytest.raises(ApiException) as gone:
        custom.get_cluster_custom_object(GROUP, VERSION, "gadgets", "g1")
    assert gone.value.status == 404
    extensions.create_custom_resource_definition(crd_body("gadgets", "Gadget", scope="Cluster"))
    assert custom.list_cluster_custom_object(GROUP, VERSION, "gadgets")["items"] == []
    extensions.delete_custom_resource_definition(f"gadgets.{GROUP}")


TIDAL = Path(__file__).resolve().parents[2] / "infra" / "tidal-scheduler"
TIDAL_GROUP, TIDAL_VERSION, TIDAL_PLURAL = "scheduling.tidal.io", "v1alpha1", "tidalschedulers"


@pytest.fixture(scope="module")
def tidal(kube: Kube) -> Iterator[k8s.CustomObjectsApi]:
    """The TidalScheduler CRD infra/ ships, installed as it is."""
    extensions = k8s.ApiextensionsV1Api(kube.api)
    extensions.create_custom_resource_definition(yaml.safe_load((TIDAL / "crd.yaml").read_text()))
    yield k8s.CustomObjectsApi(kube.api)
    extensions.delete_custom_resource_definition(f"{TIDAL_PLURAL}.{TIDAL_GROUP}")


def tidal_example(namespace: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((TIDAL / "example.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    return body


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or, with value None, delete) a dotted path of the example's spec; digits index lists."""

    def change(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = body["spec"]
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is None:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return change


RULE0 = "spec.triggers.times.rules[0]"


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        (
            _set("targetRef.namespace", None),
            ("spec.targetRef.namespace", "FieldValueRequired", "Required value"),
        ),
        (
            _set("targetRef.kind", ""),
            ("spec.targetRef.kind", "FieldValueRequired", "Required value: targetRef.kind must not be empty"),
        ),
        (
            _set("triggers.times.rules", []),
            (
                "spec.triggers.times.rules",
                "FieldValueRequired",
                "Required value: triggers.times.rules must hold at least one rule",
            ),
        ),
        (
            _set("triggers.times.rules.0.name", ""),
            (f"{RULE0}.name", "FieldValueRequired", "Required value: rule name must not be empty"),
        ),
        (
            _set("triggers.times.rules.0.cron", "0 0 8 * * *"),
            (f"{RULE0}.cron", "FieldValueInvalid", 'Invalid value: "string": cron must start with CRON_TZ='),
        ),
        (
            _set("triggers.times.rules.0.replicas", 0),
            (
                f"{RULE0}.replicas",
                "FieldValueInvalid",
                'Invalid value: "integer": replicas must be a positive integer',
            ),
        ),
        (
            _set("triggers.times.rules.0.replicas", "20"),
            (f"{RULE0}.replicas", "FieldValueTypeInvalid", 'Invalid value: "string": '),
        ),
    ],
)
def test_tidal_scheduler_crd_refuses_what_ofep_section_6_forbids(
    tidal: k8s.CustomObjectsApi,
    ns: str,
    change: Callable[[dict[str, Any]], None],
    cause: tuple[str, str, str],
) -> None:
    body = tidal_example(ns)
    change(body)
    status = refusal(
        lambda: tidal.create_namespaced_custom_object(TIDAL_GROUP, TIDAL_VERSION, ns, TIDAL_PLURAL, body)
    )
    [(field, reason, message)] = causes(status)
    assert (field, reason) == cause[:2] and message.startswith(cause[2])


def test_tidal_scheduler_example_is_accepted_and_takes_controller_status(
    tidal: k8s.CustomObjectsApi, ns: str
) -> None:
    created = tidal.create_namespaced_custom_object(
        TIDAL_GROUP, TIDAL_VERSION, ns, TIDAL_PLURAL, tidal_example(ns)
    )
    ready = {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-03-09T00:00:00Z",
        "reason": "Scheduled",
        "message": "",
    }
    status = {
        "observedGeneration": 1,
        "desiredReplicas": 20,
        "activeRule": "morning-base",
        "lastTriggerTime": "2026-03-09T08:00:00+08:00",
        "nextTriggerTime": "2026-03-09T14:00:00+08:00",
        "conditions": [ready],
    }
    name = created["metadata"]["name"]
    written = tidal.patch_namespaced_custom_object_status(
        TIDAL_GROUP, TIDAL_VERSION, ns, TIDAL_PLURAL, name, {"status": status}
    )
    assert written["status"] == status and written["metadata"]["generation"] == 1
    duplicate = {"conditions": [ready, dict(ready, status="False")]}
    for bad, field in (
        ({"lastTriggerTime": "yesterday"}, "status.lastTriggerTime"),
        (duplicate, "status.conditions[1]"),
    ):
        patch = {"status": bad}
        status_call = tidal.patch_namespaced_custom_object_status
        refused = refusal(lambda: status_call(TIDAL_GROUP, TIDAL_VERSION, ns, TIDAL_PLURAL, name, patch))  # noqa: B023
        assert [c[0] for c in causes(refused)] == [field]

"""CustomResourceDefinitions (apiextensions.k8s.io/v1) and the objects they define.

Written from https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/:
a CRD is refused unless its name is ``<plural>.<group>``, exactly one version is the storage version, the
scope is known and every version has a structural schema whose CEL rules compile. Its objects are pruned
(unknown fields, nulls where not nullable), defaulted, then validated by the schema and, when that passes,
by the rules; a refusal is a 422 Invalid whose ``details.causes`` name each field as the API server does.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from falcon_emulator.cel_rules import CelError, compile_rule, evaluate, uses_old_self
from falcon_emulator.store import KubeError, ResourceType
from falcon_emulator.util import JSON

CRD_PLURAL = "customresourcedefinitions"
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")
_TYPES = ("object", "array", "string", "integer", "number", "boolean")
_RULE_REASONS = ("FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired")
_FIELD_PATH = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['([^']*)'\]")


@dataclass(frozen=True)
class FieldError:
    """One cause of a 422: its reason (FieldValue...), field path and Go field.Error body."""

    reason: str
    field: str
    body: str

    @property
    def text(self) -> str:
        return f"{self.field}: {self.body}"


def _go(value: Any) -> str:
    """A value as Go's %#v prints it in field errors (strings quoted, JSON otherwise)."""
    return json.dumps(value, ensure_ascii=False)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(
        "FieldValueRequired", field, f"Required value: {detail}" if detail else "Required value"
    )


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {_go(value)}: {detail}")


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, f"Forbidden: {detail}")


def not_supported(field: str, value: Any, supported: list[Any]) -> FieldError:
    values = ", ".join(_go(v) for v in supported)
    return FieldError(
        "FieldValueNotSupported", field, f"Unsupported value: {_go(value)}: supported values: {values}"
    )


def invalid_error(rt: ResourceType, name: str, errors: list[FieldError]) -> KubeError:
    """The 422 the API server answers: one message listing every cause, and the causes themselves."""
    listed = errors[0].text if len(errors) == 1 else "[" + ", ".join(e.text for e in errors) + "]"
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in errors]
    details = {"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}
    return KubeError(422, "Invalid", f'{rt.kind}.{rt.group} "{name}" is invalid: {listed}', details)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# -- the CRD itself ----------------------------------------------------------------------------------
def check_definition(crd: JSON) -> list[FieldError]:
    """What the API server refuses in a CRD (create and update)."""
    spec = _mapping(crd.get("spec"))
    names = _mapping(spec.get("names"))
    errors = [required(f"spec.{key}") for key in ("group",) if not spec.get(key)]
    errors += [required(f"spec.names.{key}") for key in ("plural", "kind") if not names.get(key)]
    expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
    if crd["metadata"]["name"] != expected:
        errors.append(
            invalid("metadata.name", crd["metadata"]["name"], 'must be spec.names.plural+"."+spec.group')
        )
    if spec.get("scope") not in ("Cluster", "Namespaced"):
        errors.append(not_supported("spec.scope", spec.get("scope", ""), ["Cluster", "Namespaced"]))
    versions: list[Any] = spec["versions"] if isinstance(spec.get("versions"), list) else []
    if len([v for v in versions if isinstance(v, dict) and v.get("storage")]) != 1:
        errors.append(
            invalid("spec.versions", len(versions), "must have exactly one version marked as storage version")
        )
    for index, version in enumerate(versions):
        errors += _check_version(version, f"spec.versions[{index}]")
    return errors


def _mapping(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def _check_version(version: Any, path: str) -> list[FieldError]:
    if not isinstance(version, dict) or not version.get("name"):
        return [required(f"{path}.name")]
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, dict):
        return [required(f"{path}.schema.openAPIV3Schema", "schemas are required")]
    errors: list[FieldError] = []
    schema_path = f"{path}.schema.openAPIV3Schema"
    if schema.get("type") != "object":
        errors.append(invalid(f"{schema_path}.type", schema.get("type", ""), "must be object at the root"))
    _check_schema(schema, schema_path, errors)
    return errors


def _check_schema(node: JSON, path: str, errors: list[FieldError]) -> None:
    """Structural-schema rules (every node typed, arrays with items) and CEL rules that compile."""
    kind = node.get("type")
    has_fields = "properties" in node or "additionalProperties" in node
    if (
        kind is None
        and not node.get("x-kubernetes-int-or-string")
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        what = (
            "specified object fields" if has_fields else "specified array items" if "items" in node else None
        )
        errors.append(required(f"{path}.type", f"must not be empty for {what or 'a structural schema'}"))
    elif kind is not None and kind not in _TYPES:
        errors.append(not_supported(f"{path}.type", kind, list(_TYPES)))
    if kind == "array" and not isinstance(node.get("items"), dict):
        errors.append(required(f"{path}.items", "must be specified"))
    if "properties" in node and "additionalProperties" in node:
        errors.append(
            forbidden(
                f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
            )
        )
    if "pattern" in node:
        try:
            re.compile(str(node["pattern"]))
        except re.error as exc:
            errors.append(
                invalid(f"{path}.pattern", node["pattern"], f"must be a valid regular expression: {exc}")
            )
    for index, rule in enumerate(node.get("x-kubernetes-validations") or []):
        errors += _check_rule(node, rule, f"{path}.x-kubernetes-validations[{index}]")
    for name, child in (node.get("properties") or {}).items():
        _check_schema(child, f"{path}.properties[{name}]", errors)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            _check_schema(node[key], f"{path}.{key}", errors)


def _check_rule(node: JSON, rule: Any, path: str) -> list[FieldError]:
    if not isinstance(rule, dict) or not rule.get("rule"):
        return [required(f"{path}.rule")]
    errors: list[FieldError] = []
    for key in ("rule", "messageExpression"):
        if key in rule:
            try:
                compile_rule(str(rule[key]))
            except CelError as exc:
                errors.append(invalid(f"{path}.{key}", rule[key], str(exc)))
    if "reason" in rule and rule["reason"] not in _RULE_REASONS:
        errors.append(not_supported(f"{path}.reason", rule["reason"], list(_RULE_REASONS)))
    if "fieldPath" in rule and _resolve(node, str(rule["fieldPath"])) is None:
        errors.append(invalid(f"{path}.fieldPath", rule["fieldPath"], "fieldPath must be a valid path"))
    return errors


def _resolve(node: JSON, field_path: str) -> str | None:
    """The field path a rule names (e.g. '.name' or ".labels['a']"), checked against the schema."""
    position, parts = 0, []
    while position < len(field_path):
        match = _FIELD_PATH.match(field_path, position)
        if match is None:
            return None
        name = match.group(1) or match.group(2)
        properties = node.get("properties") or {}
        if name in properties:
            node = properties[name]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
        parts.append(name)
        position = match.end()
    return ".".join(parts) if parts else None


def served_types(crd: JSON) -> list[ResourceType]:
    """One ResourceType per served version; each carries its version (schema, subresources)."""
    spec, names = crd["spec"], crd["spec"]["names"]
    return [
        ResourceType(
            spec["group"], v["name"], names["plural"], names["kind"], spec["scope"] == "Namespaced", v
        )
        for v in spec["versions"]
        if v.get("served", True)
    ]


def accept(crd: JSON) -> None:
    """Defaults and the status the API server writes once the names are accepted and the CRD established."""
    names = crd["spec"]["names"]
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    conditions = [
        {"type": kind, "status": "True", "reason": reason, "message": message}
        for kind, reason, message in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        )
    ]
    crd["status"] = {"acceptedNames": dict(names), "storedVersions": [storage], "conditions": conditions}


# -- custom objects ----------------------------------------------------------------------------------
def has_status(rt: ResourceType) -> bool:
    """Whether /status is served: always for built-ins here, per CRD version for custom resources."""
    return rt.definition is None or "status" in (rt.definition.get("subresources") or {})


def _schema(rt: ResourceType) -> JSON:
    assert rt.definition is not None
    schema: JSON = rt.definition["schema"]["openAPIV3Schema"]
    return schema


_DROP = object()
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{_SUBDOMAIN.pattern}')"
)


def admit(rt: ResourceType, obj: JSON, old: JSON | None) -> None:
    """Prune, default and validate a custom object on create (old=None) or update; raise 422 Invalid."""
    schema = _schema(rt)
    for key in list(obj):
        if key not in _ROOT_FIELDS:
            obj[key] = _pruned(schema, key, obj[key])
            if obj[key] is _DROP:
                del obj[key]
    _default(schema, obj)
    name = obj["metadata"]["name"]
    errors = (
        []
        if _SUBDOMAIN.fullmatch(name) and len(name) <= 253
        else [invalid("metadata.name", name, _SUBDOMAIN_RULE)]
    )
    errors += _schema_errors(schema, obj, old, "", root=True)
    if not errors:
        errors = _rule_errors(schema, obj, old, "")
    if errors:
        raise invalid_error(rt, name, errors)


def _pruned(parent: JSON, name: str, value: Any) -> Any:
    """The value of property `name` with unknown fields pruned, or _DROP if the property itself goes."""
    schema = _property_schema(parent, name)
    if schema is None:
        return _DROP
    if value is None:
        return None if schema.get("nullable") else _DROP
    return _prune(schema, value)


def _property_schema(parent: JSON, name: str) -> JSON | None:
    properties = parent.get("properties") or {}
    if name in properties:
        schema: JSON = properties[name]
        return schema
    if isinstance(parent.get("additionalProperties"), dict):
        extra: JSON = parent["additionalProperties"]
        return extra
    return (
        {"x-kubernetes-preserve-unknown-fields": True}
        if parent.get("x-kubernetes-preserve-unknown-fields")
        else None
    )


def _prune(schema: JSON, value: Any) -> Any:
    if isinstance(value, dict) and (
        "properties" in schema or "additionalProperties" in schema or schema.get("type") == "object"
    ):
        kept = {}
        for key, item in value.items():
            pruned = _pruned(schema, key, item)
            if pruned is not _DROP:
                kept[key] = pruned
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(schema["items"], item) for item in value]
    return value


def _default(schema: JSON, value: Any) -> None:
    if isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                _default(child, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for kind, python in (
        ("integer", int),
        ("number", float),
        ("string", str),
        ("array", list),
        ("object", dict),
    ):
        if isinstance(value, python):
            return kind
    return "unknown"


def _type_ok(schema: JSON, value: Any) -> bool:
    kind, actual = schema.get("type"), _type_name(value)
    if schema.get("x-kubernetes-int-or-string"):
        return actual in ("integer", "string")
    if kind is None or (value is None and schema.get("nullable")):
        return True
    return actual == kind or (kind == "number" and actual == "integer")


def _ratcheted(schema: JSON, value: Any, old: Any) -> bool:
    """Validation ratcheting (GA in Kubernetes 1.33): a value an update leaves unchanged is not refused again,
    except by transition rules, which compare it with its old self."""
    return old is not None and value == old and not _has_transition_rule(schema)


def _has_transition_rule(schema: JSON) -> bool:
    if any(uses_old_self(str(rule["rule"])) for rule in schema.get("x-kubernetes-validations") or []):
        return True
    children = list((schema.get("properties") or {}).values())
    children += [
        schema[key] for key in ("items", "additionalProperties") if isinstance(schema.get(key), dict)
    ]
    return any(_has_transition_rule(child) for child in children)


def _old_child(old: Any, name: str) -> Any:
    """The old value at the same place; list items are not correlated."""
    return old.get(name) if isinstance(old, dict) else None


def _schema_errors(schema: JSON, value: Any, old: Any, path: str, root: bool = False) -> list[FieldError]:
    if _ratcheted(schema, value, old):
        return []
    if not _type_ok(schema, value):
        detail = f"{path or 'body'} in body must be of type {schema.get('type')}: {_go(_type_name(value))}"
        return [
            FieldError("FieldValueTypeInvalid", path, f"Invalid value: {_go(_type_name(value))}: {detail}")
        ]
    errors = _keyword_errors(schema, value, path)
    if isinstance(value, dict):
        errors += [required(_child(path, name)) for name in schema.get("required") or [] if name not in value]
        for name, item in value.items():
            child = None if root and name in _ROOT_FIELDS else _property_schema(schema, name)
            if child is not None:
                errors += _schema_errors(child, item, _old_child(old, name), _child(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += _schema_errors(schema["items"], item, None, f"{path}[{index}]")
    return errors


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_STRING_FORMATS = {
    "date-time": re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"),
    "date": re.compile(r"\d{4}-\d{2}-\d{2}"),
}


def _keyword_errors(schema: JSON, value: Any, path: str) -> list[FieldError]:
    """enum, then the keywords of numbers, strings and lists."""
    errors: list[FieldError] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(not_supported(path, value, schema["enum"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        errors += _number_errors(schema, value, path)
    if isinstance(value, str):
        errors += _string_errors(schema, value, path)
    if isinstance(value, list):
        errors += _list_errors(schema, value, path)
    return errors


def _string_errors(schema: JSON, value: str, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(value) < schema.get("minLength", 0):
        errors.append(
            invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
        )
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(
            FieldError(
                "FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes"
            )
        )
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(invalid(path, value, f"{path} in body should match '{schema['pattern']}'"))
    form = _STRING_FORMATS.get(str(schema.get("format")))
    if form is not None and not form.fullmatch(value):
        errors.append(
            invalid(path, value, f"{path} in body must be of type {schema['format']}: {_go(value)}")
        )
    return errors


def _list_errors(schema: JSON, value: list[Any], path: str) -> list[FieldError]:
    """minItems/maxItems, and the uniqueness x-kubernetes-list-type set or map demands."""
    errors: list[FieldError] = []
    if len(value) < schema.get("minItems", 0):
        errors.append(
            invalid(path, len(value), f"{path} in body should have at least {schema['minItems']} items")
        )
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        body = f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
        errors.append(FieldError("FieldValueTooMany", path, body))
    list_type, seen = schema.get("x-kubernetes-list-type"), []
    for index, item in enumerate(value if list_type in ("set", "map") else []):
        key = item
        if list_type == "map" and isinstance(item, dict):
            key = {k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or []}
        if key in seen:
            errors.append(
                FieldError("FieldValueDuplicate", f"{path}[{index}]", f"Duplicate value: {_go(key)}")
            )
        seen.append(key)
    return errors


def _number_errors(schema: JSON, value: float, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    low, high = _INT_RANGES.get(str(schema.get("format")), (None, None))
    if schema.get("type") == "integer" and low is not None and high is not None and not low <= value <= high:
        errors.append(
            invalid(path, value, f"{path} in body must be of type {schema['format']}: {_go(value)}")
        )
    if "minimum" in schema:
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < schema["minimum"] or (exclusive and value == schema["minimum"]):
            bound = "greater than" if exclusive else "greater than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {bound} {schema['minimum']}"))
    if "maximum" in schema:
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > schema["maximum"] or (exclusive and value == schema["maximum"]):
            bound = "less than" if exclusive else "less than or equal to"
            errors.append(invalid(path, value, f"{path} in body should be {bound} {schema['maximum']}"))
    return errors


def _rule_errors(schema: JSON, value: Any, old: Any, path: str) -> list[FieldError]:
    """Every x-kubernetes-validations rule of every node present in the object, parents first."""
    if _ratcheted(schema, value, old):
        return []
    errors = [
        error
        for rule in schema.get("x-kubernetes-validations") or []
        if (error := _run_rule(schema, rule, value, old, path)) is not None
    ]
    if isinstance(value, dict):
        for name, item in value.items():
            child = _property_schema(schema, name) if name not in _ROOT_FIELDS or path else None
            if child is not None and item is not None:
                errors += _rule_errors(child, item, _old_child(old, name), _child(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += _rule_errors(schema["items"], item, None, f"{path}[{index}]")
    return errors


def _run_rule(schema: JSON, rule: JSON, value: Any, old: Any, path: str) -> FieldError | None:
    expression, kind = str(rule["rule"]), str(schema.get("type", "object"))
    context = {"self": value}
    if uses_old_self(expression):
        if old is None:
            return None
        context["oldSelf"] = old
    try:
        result = evaluate(expression, context)
    except CelError as exc:
        return invalid(path, kind, f"{exc} evaluating rule: {expression}")
    if result is True:
        return None
    if result is not False:
        return invalid(path, kind, f"rule did not evaluate to a bool evaluating rule: {expression}")
    field = path
    if rule.get("fieldPath"):
        field = _child(path, _resolve(schema, str(rule["fieldPath"])) or "")
    return _rule_failure(rule.get("reason"), field, kind, _message(rule, context))


def _message(rule: JSON, context: JSON) -> str:
    """messageExpression's result when it yields a non-empty string, else message, else 'failed rule: ...'."""
    if rule.get("messageExpression"):
        try:
            text = evaluate(str(rule["messageExpression"]), context)
        except CelError:
            text = None
        if isinstance(text, str) and text.strip():
            return text
    return str(rule.get("message") or f"failed rule: {rule['rule']}")


def _rule_failure(reason: Any, field: str, kind: str, message: str) -> FieldError:
    if reason == "FieldValueForbidden":
        return forbidden(field, message)
    if reason == "FieldValueRequired":
        return required(field, message)
    if reason == "FieldValueDuplicate":
        return FieldError("FieldValueDuplicate", field, f"Duplicate value: {_go(kind)}")
    return invalid(field, kind, message)

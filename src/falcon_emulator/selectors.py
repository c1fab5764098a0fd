"""Kubernetes label selectors (equality and set-based) and field selectors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


class SelectorError(ValueError):
    """The selector string cannot be parsed (the API answers 400 BadRequest)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


_SET_RE = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_RE = re.compile(r"^([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([^\s!=(),]+)$")


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current.strip())
    return terms


def _parse_term(term: str) -> Requirement:
    if match := _SET_RE.match(term):
        values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
        return Requirement(match.group(1), match.group(2), values)
    if match := _EQ_RE.match(term):
        op = "!=" if match.group(2) == "!=" else "="
        return Requirement(match.group(1), op, (match.group(3),))
    if match := _KEY_RE.match(term):
        return Requirement(match.group(2), "!" if match.group(1) else "exists")
    raise SelectorError(f"unable to parse requirement: {term!r}")


def parse_label_selector(text: str | None) -> list[Requirement]:
    return [_parse_term(term) for term in _split_terms(text or "")]


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    actual = labels or {}
    return all(req.matches(actual) for req in requirements)


def field_value(obj: JSON, path: str) -> str:
    """Dotted-path lookup; a missing field compares as the empty string."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    return "" if current is None else str(current)


def parse_field_selector(text: str | None) -> Callable[[JSON], bool]:
    checks: list[tuple[str, bool, str]] = []
    for term in _split_terms(text or ""):
        match = _EQ_RE.match(term)
        if match is None:
            raise SelectorError(f"invalid field selector: {term!r}")
        checks.append((match.group(1), match.group(2) != "!=", match.group(3)))

    def predicate(obj: JSON) -> bool:
        return all((field_value(obj, path) == value) == equal for path, equal, value in checks)

    return predicate


def match_expressions(expressions: list[JSON], labels: Mapping[str, str]) -> bool:
    """Node-affinity style matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    for expr in expressions:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        value = labels.get(key)
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and value in values:
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op in ("Gt", "Lt") and not _compare(value, values, op):
            return False
    return True


def _compare(value: str | None, values: list[str], op: str) -> bool:
    try:
        left, right = int(value or ""), int(values[0])
    except (ValueError, IndexError):
        return False
    return left > right if op == "Gt" else left < right

"""Small shared helpers: timestamps, random names, JSON merge/patch."""

from __future__ import annotations

import copy
import json
import random
import secrets
import time
import zlib
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what k8s uses for generateName suffixes


def rfc3339(ts: float | None = None) -> str:
    """Kubernetes-style second-precision UTC timestamp."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(ts: float | None = None) -> str:
    """Google-style microsecond UTC timestamp."""
    moment = datetime.fromtimestamp(time.time() if ts is None else ts, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def numeric_id(text: str) -> str:
    """A stable uint64-looking id for a Compute resource, derived from its name or link."""
    return str(zlib.crc32(text.encode()) * 1000003)


# The emulator's own generator: it runs in threads of test processes, and drawing from the
# global one there changed its state under Hypothesis, which warns when a strategy's draw sees it.
RANDOM = random.Random()


def random_suffix(length: int = 5) -> str:
    return "".join(RANDOM.choice(_NAME_CHARS) for _ in range(length))


def random_hex(length: int = 8) -> str:
    return secrets.token_hex((length + 1) // 2)[:length]


def clone(obj: JSON) -> JSON:
    """Deep copy of a JSON-shaped dict (faster than copy.deepcopy for plain JSON)."""
    result: JSON = json.loads(json.dumps(obj))
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; strategic-merge patches of dicts are treated the same way."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.lstrip("/").split("/")]


def _container(doc: Any, parts: list[str]) -> Any:
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def json_patch(doc: JSON, operations: list[JSON]) -> JSON:
    """RFC 6902 subset: add, replace, remove, test."""
    result = copy.deepcopy(doc)
    for op in operations:
        parts = _pointer(str(op["path"]))
        parent = _container(result, parts)
        key = parts[-1]
        kind = op.get("op")
        if kind == "test":
            current = parent[int(key)] if isinstance(parent, list) else parent.get(key)
            if current != op.get("value"):
                raise ValueError(f"test failed at {op['path']}")
        elif kind == "remove":
            del parent[int(key) if isinstance(parent, list) else key]
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(index, op.get("value"))
                else:
                    parent[index] = op.get("value")
            else:
                parent[key] = op.get("value")
        else:
            raise ValueError(f"unsupported JSON patch op {kind!r}")
    return result

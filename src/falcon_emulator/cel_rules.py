"""CEL validation rules of CRD schemas (``x-kubernetes-validations``), compiled and run with a real CEL.

Kubernetes type-checks a rule when the CRD is written and refuses one that does not compile; the library
here (common-expression-language) parses strictly but resolves names only when it runs, so a rule is also
checked for functions and variables Kubernetes does not declare. Kubernetes extension functions the library
lacks (``split``, ``quantity``, ...) are refused at the CRD write, naming the function, rather than failing
on every object later.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import cel

# Standard CEL functions of Kubernetes' CEL environment that the library implements.
_FUNCTIONS = frozenset(
    {
        "size",
        "has",
        "matches",
        "startsWith",
        "endsWith",
        "contains",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "duration",
        "timestamp",
        "type",
        "dyn",
        "hasValue",
        "value",
        "orValue",
        "getFullYear",
        "getMonth",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
    }
)
# Functions of Kubernetes' CEL libraries (strings, lists, regex, URLs, IPs, quantities, sets, format) that
# the library lacks: refused at the CRD write as unsupported here, where the API server would accept them.
_KUBERNETES_ONLY = frozenset(
    {
        "charAt",
        "indexOf",
        "lastIndexOf",
        "lowerAscii",
        "upperAscii",
        "replace",
        "split",
        "substring",
        "trim",
        "join",
        "format",
        "quote",
        "reverse",
        "isSorted",
        "sum",
        "min",
        "max",
        "flatten",
        "slice",
        "find",
        "findAll",
        "url",
        "isURL",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "quantity",
        "isQuantity",
        "sets",  # sets.contains(...) and the like parse as a call on a variable named sets
        "math",
    }
)
_MACRO_VARIABLE = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class CelError(Exception):
    """A rule that does not compile, or that failed while it ran."""


@lru_cache(maxsize=4096)
def compile_rule(expression: str) -> cel.Program:
    """Compile once per distinct text; raise CelError with the compiler's words as the API server does."""
    try:
        program = cel.compile(expression)
    except ValueError as exc:
        raise CelError(f"compilation failed: {exc}") from exc
    bound = {"self", "oldSelf", *_MACRO_VARIABLE.findall(expression)}
    for name in [*program.variables(), *program.functions()]:
        if name in _KUBERNETES_ONLY:
            raise CelError(
                f"compilation failed: function '{name}' is not supported by the emulator's CEL "
                "(common-expression-language)"
            )
    for name in program.variables():
        if name not in bound:
            raise CelError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")
    for name in program.functions():
        if _IDENTIFIER.fullmatch(name) and name not in _FUNCTIONS:
            raise CelError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")
    return program


def uses_old_self(expression: str) -> bool:
    """A transition rule: Kubernetes runs it only on updates where the old value exists."""
    return "oldSelf" in compile_rule(expression).variables()


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    try:
        return compile_rule(expression).execute(context)
    except KeyError as exc:
        raise CelError(f"no such key: {exc.args[0]}") from exc
    except Exception as exc:  # the library raises TypeError/IndexError/RuntimeError/... for runtime errors
        raise CelError(f"{type(exc).__name__}: {exc}") from exc

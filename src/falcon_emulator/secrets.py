"""v1 Secrets as the API server stores them and the kubelet reads them.

On write, ``stringData`` is merged into ``data`` (base64-encoded, its keys winning) and dropped, as
the API server does; ``type`` defaults to ``Opaque``; a ``data`` value that is not base64, or a key
outside ``[-._a-zA-Z0-9]+``, is refused with 422 Invalid. The kubelet resolves an env var's
``secretKeyRef`` from the pod's namespace: a missing Secret or key, unless the ref is ``optional``,
holds the container in ``CreateContainerConfigError``.
"""

from __future__ import annotations

import base64
import binascii
import re

from falcon_emulator.store import KubeError, KubeStore
from falcon_emulator.util import JSON

_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def admit(secret: JSON) -> None:
    data = dict(secret.get("data") or {})
    for key, value in (secret.pop("stringData", None) or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    causes = [
        f"data[{key}]: Invalid value: {key!r}: a valid config key must consist of alphanumeric "
        "characters, '-', '_' or '.'"
        for key in data
        if not _KEY.fullmatch(key)
    ]
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            causes.append(f"data[{key}]: Invalid value: illegal base64 data")
    if causes:
        name = secret.get("metadata", {}).get("name", "")
        raise KubeError(422, "Invalid", f'Secret "{name}" is invalid: {", ".join(causes)}')
    secret["data"] = data
    secret.setdefault("type", "Opaque")


def resolve(store: KubeStore, namespace: str, ref: JSON) -> str | None:
    """The value a secretKeyRef names; None when an optional ref finds nothing.
    Raises LookupError with the kubelet's message when a required one finds nothing."""
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    secret = store.get("secrets", namespace, name)
    if secret is None:
        if ref.get("optional"):
            return None
        raise LookupError(f'secret "{name}" not found')
    value = (secret.get("data") or {}).get(key)
    if value is None:
        if ref.get("optional"):
            return None
        raise LookupError(f"couldn't find key {key} in Secret {namespace}/{name}")
    return base64.b64decode(str(value)).decode("utf-8", "replace")

"""Cloud Storage JSON API v1 ``buckets.getIamPolicy``: ``GET /storage/v1/b/{bucket}/iam``.

The policy is what the emulator's GCS FUSE judge uses (``gcsfuse``): the bucket's configured ``writers``,
bound to ``roles/storage.objectUser`` (what ``infra/edge/bootstrap.sh`` grants). A bucket no project
configures answers 404 ``The specified bucket does not exist.``, with Cloud Storage's ``errors[]``.
The answer's shape is the reference's Policy resource: kind ``storage#policy``, ``resourceId``
``projects/_/buckets/NAME``, ``version``, ``etag``, ``bindings[]`` of ``role`` and ``members``.
"""

from __future__ import annotations

import base64

from fastapi import APIRouter, Request
from starlette.responses import Response

from falcon_emulator.errors import json_response
from falcon_emulator.gke_api import emulator_state

router = APIRouter()
OBJECT_USER = "roles/storage.objectUser"


@router.get("/storage/v1/b/{bucket}/iam")
async def get_iam_policy(bucket: str, request: Request) -> Response:
    state = emulator_state(request)
    with state.lock:
        configs = [p.buckets[bucket] for p in state.config.projects.values() if bucket in p.buckets]
    if not configs:
        message = "The specified bucket does not exist."
        error = {
            "code": 404,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": "notFound"}],
        }
        return json_response({"error": error}, 404)
    writers = list(configs[0].writers)
    bindings = [{"role": OBJECT_USER, "members": writers}] if writers else []
    return json_response(
        {
            "kind": "storage#policy",
            "resourceId": f"projects/_/buckets/{bucket}",
            "version": 1,
            "etag": base64.b64encode(b"\x08\x01").decode(),
            "bindings": bindings,
        }
    )

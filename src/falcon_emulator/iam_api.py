"""Cloud Resource Manager v1 ``projects.testIamPermissions``, as the REST reference documents it.

``POST /v1/projects/{resource}:testIamPermissions`` with ``{"permissions": [...]}`` answers the subset the
caller holds, ``{"permissions": [...]}``; proto3 JSON leaves an empty list out, so holding none answers
``{}``. The call itself needs no permission. A permission with a wildcard, or not of the
``service.resource.verb`` shape, is refused with 400 INVALID_ARGUMENT; a project the caller cannot see
(here: one the config does not have) answers 403, as Resource Manager does for projects that do not exist.
What the caller holds is the project's ``iamPermissions`` in the config (absent: every permission asked).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from falcon_emulator.errors import GoogleError, json_response
from falcon_emulator.gke_api import emulator_state, read_json

router = APIRouter()
_PERMISSION = re.compile(r"[a-z][a-zA-Z0-9]*(\.[a-zA-Z][a-zA-Z0-9]*){2,}")


@router.post("/v1/projects/{project}:testIamPermissions")
async def test_iam_permissions(project: str, request: Request) -> Response:
    state = emulator_state(request)
    try:
        body: Any = await read_json(request)
        asked = body.get("permissions", []) if isinstance(body, dict) else None
        if not isinstance(asked, list) or not all(isinstance(p, str) for p in asked):
            raise GoogleError(400, "Invalid JSON payload received. 'permissions' must be a list of strings.")
        for permission in asked:
            if not _PERMISSION.fullmatch(permission):
                raise GoogleError(400, f"Permission {permission} is not valid.")
        with state.lock:
            config = state.config.projects.get(project)
            if config is None:
                raise GoogleError(403, "The caller does not have permission")
            granted = config.iam_permissions
            held = [p for p in dict.fromkeys(asked) if granted is None or p in granted]
        return json_response({"permissions": held} if held else {})
    except GoogleError as error:
        return error.response()

"""compute.googleapis.com/compute/v1: reservations (get, list, aggregated list, read by zone exactly), machine
types (get: a TPU type only in the zones offering it) and
regional resource policies (get, list, insert, delete, as ``compute_v1.ResourcePoliciesClient`` sends them)
with their region operations.

Routes and bodies follow compute_v1/services/{reservations,resource_policies}/transports/rest_base.py; error
bodies carry Compute's ``errors[].reason`` (notFound, alreadyExists, invalid, resourceInUseByAnotherResource).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from fastapi import APIRouter, Request
from google.cloud import compute_v1
from starlette.responses import Response

from falcon_emulator.errors import GoogleError, json_response
from falcon_emulator.gke_api import emulator_state, read_json
from falcon_emulator.state import COMPUTE_BASE, EmulatorState, ResourcePolicy
from falcon_emulator.tpu_catalog import is_known_machine_type, offering_zones, tpu_machine
from falcon_emulator.util import JSON, numeric_id, random_hex, rfc3339

router = APIRouter()
# Compute resource names (https://cloud.google.com/compute/docs/naming-resources).
_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")


class ComputeError(GoogleError):
    """A Compute error with its ``errors[].reason``."""

    def __init__(self, code: int, message: str, reason: str) -> None:
        super().__init__(code, message)
        self.reason = reason


def _reason(error: GoogleError) -> str:
    if isinstance(error, ComputeError):
        return error.reason
    return {
        404: "notFound",
        400: "invalid",
        409: "alreadyExists",
        429: "rateLimitExceeded",
        403: "forbidden",
    }.get(error.code, "backendError")


@router.api_route("/compute/v1/{path:path}", methods=["GET", "POST", "DELETE", "PATCH", "PUT"])
async def compute(path: str, request: Request) -> Response:
    state = emulator_state(request)
    try:
        body = await read_json(request) if request.method == "POST" else None
        with state.lock:
            return json_response(_dispatch(state, request.method, path.split("/"), body))
    except GoogleError as error:
        return compute_error_response(error)


def compute_error_response(error: GoogleError) -> Response:
    """Compute's envelope adds ``errors[]`` with a ``reason`` (notFound, rateLimitExceeded, ...)."""
    envelope = error.envelope()
    envelope["error"]["errors"] = [{"message": error.message, "domain": "global", "reason": _reason(error)}]
    return json_response(envelope, error.code)


def _dispatch(state: EmulatorState, method: str, parts: list[str], body: Any) -> JSON:
    match method, parts:
        case "GET", ["projects", project, "zones", zone, "reservations"]:
            items = [r.to_json() for (p, z, _), r in state.reservations.items() if (p, z) == (project, zone)]
            return _list("compute#reservationList", f"projects/{project}/zones/{zone}/reservations", items)
        case "GET", ["projects", project, "zones", zone, "reservations", name]:
            reservation = state.reservations.get((project, zone, name))
            if reservation is None:
                raise _not_found(f"projects/{project}/zones/{zone}/reservations/{name}")
            return reservation.to_json()
        case "GET", ["projects", project, "zones", zone, "machineTypes", name]:
            return _machine_type(state, project, zone, name)
        case "GET", ["projects", project, "aggregated", "reservations"]:
            return _aggregated_reservations(state, project)
        case "GET", ["projects", project, "regions", region, "resourcePolicies"]:
            items = [
                p.to_json()
                for (pr, r, _), p in state.resource_policies.items()
                if (pr, r) == (project, region)
            ]
            return _list(
                "compute#resourcePolicyList", f"projects/{project}/regions/{region}/resourcePolicies", items
            )
        case "GET", ["projects", project, "regions", region, "resourcePolicies", name]:
            return _policy(state, project, region, name).to_json()
        case "POST", ["projects", project, "regions", region, "resourcePolicies"]:
            return _insert_policy(state, project, region, body)
        case "DELETE", ["projects", project, "regions", region, "resourcePolicies", name]:
            return _delete_policy(state, project, region, name)
        case "GET", ["projects", project, "regions", region, "operations", name]:
            operation = state.compute_operations.get((project, name))
            if operation is None:
                raise _not_found(f"projects/{project}/regions/{region}/operations/{name}")
            return operation
    if method != "GET":
        raise GoogleError(
            501, f"Method {method} /compute/v1/{'/'.join(parts)} is not implemented by the emulator."
        )
    raise _not_found("/".join(parts))


def _machine_type(state: EmulatorState, project: str, zone: str, name: str) -> JSON:
    """machineTypes.get: a TPU machine type exists only in the zones offering it (tpu_catalog, or the
    config's tpuZones); another well-formed machine type in every zone; anything else is notFound."""
    path = f"projects/{project}/zones/{zone}/machineTypes/{name}"
    if project not in state.config.projects:
        raise _not_found(f"projects/{project}")
    machine = tpu_machine(name)
    offered = (
        zone in offering_zones(machine, state.config.tpu_zones)
        if machine is not None
        else is_known_machine_type(name)
    )
    if not offered:
        raise _not_found(path)
    link = f"{COMPUTE_BASE}/{path}"
    found: JSON = {
        "kind": "compute#machineType",
        "id": numeric_id(name),
        "name": name,
        "description": name,
        "zone": zone,
        "selfLink": link,
    }
    if machine is not None:
        found["accelerators"] = [
            {"guestAcceleratorType": machine.accelerator, "guestAcceleratorCount": machine.chips}
        ]
    return found


def _not_found(path: str) -> ComputeError:
    return ComputeError(404, f"The resource '{path}' was not found", "notFound")


def _list(kind: str, path: str, items: list[JSON]) -> JSON:
    link = f"{COMPUTE_BASE}/{path}"
    return {"kind": kind, "id": link, "items": items, "selfLink": link}


def _aggregated_reservations(state: EmulatorState, project: str) -> JSON:
    scoped: dict[str, JSON] = {}
    for (p, zone, _), reservation in state.reservations.items():
        if p == project:
            scoped.setdefault(f"zones/{zone}", {"reservations": []})["reservations"].append(
                reservation.to_json()
            )
    link = f"{COMPUTE_BASE}/projects/{project}/aggregated/reservations"
    return {"kind": "compute#reservationAggregatedList", "id": link, "items": scoped, "selfLink": link}


def _policy(state: EmulatorState, project: str, region: str, name: str) -> ResourcePolicy:
    policy = state.resource_policies.get((project, region, name))
    if policy is None:
        raise _not_found(f"projects/{project}/regions/{region}/resourcePolicies/{name}")
    return policy


def _insert_policy(state: EmulatorState, project: str, region: str, body: Any) -> JSON:
    """resourcePolicies.insert: the body is the ResourcePolicy, parsed like the real API (unknown fields
    ignored)."""
    spec = _parse_policy(body)
    name = str(spec.get("name", ""))
    if not _NAME.fullmatch(name):
        raise ComputeError(
            400,
            f"Invalid value for field 'resource.name': '{name}'. "
            f"Must be a match of regex '(?:{_NAME.pattern})'",
            "invalid",
        )
    path = f"projects/{project}/regions/{region}/resourcePolicies/{name}"
    if (project, region, name) in state.resource_policies:
        raise ComputeError(409, f"The resource '{path}' already exists", "alreadyExists")
    policy = ResourcePolicy(project, region, name, spec)
    state.resource_policies[(project, region, name)] = policy
    return _done_operation(state, project, region, "insert", policy.self_link)


def _parse_policy(body: Any) -> JSON:
    if not isinstance(body, dict):
        raise ComputeError(400, "Invalid JSON payload: the resource policy must be an object.", "invalid")
    try:
        message = compute_v1.ResourcePolicy.from_json(json.dumps(body), ignore_unknown_fields=True)
    except Exception as exc:  # json_format.ParseError and friends
        raise ComputeError(400, f"Invalid JSON payload received. {exc}", "invalid") from exc
    spec: JSON = compute_v1.ResourcePolicy.to_dict(
        message, preserving_proto_field_name=False, always_print_fields_with_no_presence=False
    )
    return spec


def _delete_policy(state: EmulatorState, project: str, region: str, name: str) -> JSON:
    """Compute refuses to delete a resource another resource uses (here: a node pool placed by the policy)."""
    policy = _policy(state, project, region, name)
    for cluster in state.clusters.values():
        for pool in cluster.node_pools.values():
            placement = pool.spec.get("placementPolicy", {})
            zone = pool.locations[0] if pool.locations else ""
            if (
                cluster.project == project
                and zone.startswith(f"{region}-")
                and placement.get("policyName") == name
            ):
                raise ComputeError(
                    400,
                    f"The resource_policy resource '{policy.self_link}' is already being used by "
                    f"'{cluster.path}/nodePools/{pool.name}'",
                    "resourceInUseByAnotherResource",
                )
    del state.resource_policies[(project, region, name)]
    return _done_operation(state, project, region, "delete", policy.self_link)


def _done_operation(state: EmulatorState, project: str, region: str, kind: str, target: str) -> JSON:
    """A regional Compute Operation, already DONE (the emulator applies the change at once)."""
    name = f"operation-{int(time.time() * 1000)}-{random_hex(13)}-{random_hex(8)}"
    region_link = f"{COMPUTE_BASE}/projects/{project}/regions/{region}"
    now = rfc3339()
    operation: JSON = {
        "kind": "compute#operation",
        "id": numeric_id(name),
        "name": name,
        "operationType": kind,
        "targetLink": target,
        "targetId": numeric_id(target),
        "status": "DONE",
        "user": "emulator@falcon.local",
        "progress": 100,
        "insertTime": now,
        "startTime": now,
        "endTime": now,
        "selfLink": f"{region_link}/operations/{name}",
        "region": region_link,
    }
    state.compute_operations[(project, name)] = operation
    return operation

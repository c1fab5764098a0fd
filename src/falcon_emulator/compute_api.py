"""compute.googleapis.com/compute/v1 reservations (get, list, aggregated list)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from falcon_emulator.errors import GoogleError, json_response
from falcon_emulator.gke_api import emulator_state
from falcon_emulator.state import COMPUTE_BASE, EmulatorState
from falcon_emulator.util import JSON

router = APIRouter()


@router.api_route("/compute/v1/{path:path}", methods=["GET", "POST", "DELETE", "PATCH", "PUT"])
async def compute(path: str, request: Request) -> Response:
    state = emulator_state(request)
    try:
        with state.lock:
            fault = state.faults.take(request.method, request.url.path)
            if fault is not None:
                raise GoogleError(fault.status, fault.message, fault.status_name)
            if request.method != "GET":
                raise GoogleError(501, f"Method {request.method} is not implemented by the emulator.")
            return json_response(_dispatch(state, path.split("/")))
    except GoogleError as error:
        body = error.envelope()
        body["error"]["errors"] = [
            {"message": error.message, "domain": "global", "reason": _reason(error.code)}
        ]
        return json_response(body, error.code)


def _reason(code: int) -> str:
    return {404: "notFound", 400: "invalid", 429: "rateLimitExceeded", 403: "forbidden"}.get(
        code, "backendError"
    )


def _dispatch(state: EmulatorState, parts: list[str]) -> JSON:
    match parts:
        case ["projects", project, "zones", zone, "reservations"]:
            items = [r.to_json() for (p, z, _), r in state.reservations.items() if (p, z) == (project, zone)]
            link = f"{COMPUTE_BASE}/projects/{project}/zones/{zone}/reservations"
            return {"kind": "compute#reservationList", "id": link, "items": items, "selfLink": link}
        case ["projects", project, "zones", zone, "reservations", name]:
            reservation = state.reservations.get((project, zone, name))
            if reservation is None:
                path = f"projects/{project}/zones/{zone}/reservations/{name}"
                raise GoogleError(404, f"The resource '{path}' was not found")
            return reservation.to_json()
        case ["projects", project, "aggregated", "reservations"]:
            scoped: dict[str, JSON] = {}
            for (p, zone, _), reservation in state.reservations.items():
                if p == project:
                    scoped.setdefault(f"zones/{zone}", {"reservations": []})["reservations"].append(
                        reservation.to_json()
                    )
            link = f"{COMPUTE_BASE}/projects/{project}/aggregated/reservations"
            return {
                "kind": "compute#reservationAggregatedList",
                "id": link,
                "items": scoped,
                "selfLink": link,
            }
    raise GoogleError(404, f"The resource '{'/'.join(parts)}' was not found")

"""The emulator's own table of TPU machine types, written from Google's documentation (never from Falcon's).

Sources:
* v5e: https://cloud.google.com/tpu/docs/v5e (topologies 1x1 .. 16x16; ct5lp-hightpu-1t/4t/8t)
* v5p: https://cloud.google.com/tpu/docs/v5p and xpk ``generate_tpu_topologies(max_cubes=140)``
* v6e: https://cloud.google.com/tpu/docs/v6e ("Topology | TPU chips | Hosts | VMs | Machine type (GKE API)")
* TPU7x: https://docs.cloud.google.com/tpu/docs/tpu7x and
  https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood (up to 144 cubes of 4x4x4)
* Accelerator labels: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus
* Zones: https://cloud.google.com/tpu/docs/regions-zones ; v6e in asia-northeast1-b from
  https://cloud.google.com/kubernetes-engine/docs/concepts/dws
* Minimum GKE versions: flex-start for TPUs 1.33.0-gke.1712000 (concepts/dws), TPU7x 1.34.0-gke.2201000
  (concepts/tpu-ironwood).

``tpu7x-standard-1t`` is listed only by xpk, not by Google's TPU7x pages, so it is not in the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

FLEX_START_MIN_VERSION = "1.33.0-gke.1712000"
TPU7X_MIN_VERSION = "1.34.0-gke.2201000"
_2D_MULTI_HOST = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_3D_SMALL = ("2x2x2", "2x2x4", "2x4x4")
_V5E = "tpu-v5-lite-podslice"
_V6E = "tpu-v6e-slice"
_V5E_ZONES = ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a")
_V5P_ZONES = ("us-central1-a", "us-east5-a")
_V6E_ZONES = (
    "us-central1-b",
    "us-east1-d",
    "us-east5-a",
    "us-east5-b",
    "europe-west4-a",
    "asia-northeast1-b",
)
_TPU7X_ZONES = ("us-central1-c",)


@dataclass(frozen=True)
class TpuMachineType:
    """One GKE TPU machine type: what one VM (= one node) of it holds and which slices it can form."""

    name: str
    accelerator: str  # node label cloud.google.com/gke-tpu-accelerator
    chips: int  # google.com/tpu per VM
    dims: int  # 2 for a 2D torus, 3 for a 3D torus
    single_host_topology: str  # the topology of one VM on its own
    max_cubes: int = 0  # 3D: largest slice in 4x4x4 cubes; 0 = only the listed shapes
    multi_host: tuple[str, ...] = ()  # 2D multi-host topologies (3D ones are generated from max_cubes)
    zones: tuple[str, ...] = ()
    min_version: str | None = None

    @property
    def generation(self) -> str:
        return self.name.split("-")[0]

    def vms(self, topology: str) -> int | None:
        """VMs (nodes) of a slice of this topology on this machine type, or None if it cannot form it."""
        if topology == self.single_host_topology:
            return 1
        if topology in self.multi_host or (self.dims == 3 and _valid_3d(topology, self.max_cubes)):
            return chips(topology) // self.chips
        return None


def chips(topology: str) -> int:
    return prod(int(d) for d in topology.split("x"))


def _valid_3d(topology: str, max_cubes: int) -> bool:
    """AxBxC with A<=B<=C: the three small shapes, or multiples of 4 up to max_cubes 4x4x4 cubes."""
    if topology in _3D_SMALL:
        return True
    if not re.fullmatch(r"\d+x\d+x\d+", topology):
        return False
    dims = [int(d) for d in topology.split("x")]
    ordered = dims == sorted(dims)
    return ordered and all(d > 0 and d % 4 == 0 for d in dims) and chips(topology) // 64 <= max_cubes


def _two_d(name: str, accelerator: str, chips_per_vm: int, zones: tuple[str, ...]) -> TpuMachineType:
    single = {1: "1x1", 4: "2x2", 8: "2x4"}[chips_per_vm]
    multi = _2D_MULTI_HOST if chips_per_vm == 4 else ()
    return TpuMachineType(name, accelerator, chips_per_vm, 2, single, multi_host=multi, zones=zones)


CATALOG: dict[str, TpuMachineType] = {
    m.name: m
    for m in (
        _two_d("ct5lp-hightpu-1t", _V5E, 1, _V5E_ZONES),
        _two_d("ct5lp-hightpu-4t", _V5E, 4, _V5E_ZONES),
        _two_d("ct5lp-hightpu-8t", _V5E, 8, _V5E_ZONES),
        TpuMachineType("ct5p-hightpu-4t", "tpu-v5p-slice", 4, 3, "2x2x1", max_cubes=140, zones=_V5P_ZONES),
        _two_d("ct6e-standard-1t", _V6E, 1, _V6E_ZONES),
        _two_d("ct6e-standard-4t", _V6E, 4, _V6E_ZONES),
        _two_d("ct6e-standard-8t", _V6E, 8, _V6E_ZONES),
        TpuMachineType(
            "tpu7x-standard-4t",
            "tpu7x",
            4,
            3,
            "2x2x1",
            max_cubes=144,
            zones=_TPU7X_ZONES,
            min_version=TPU7X_MIN_VERSION,
        ),
    )
}
# Other Compute Engine machine types, by the FAMILY-TYPE-SIZE naming of
# https://cloud.google.com/compute/docs/machine-resource (e2-standard-4, n2d-highmem-8, a3-highgpu-8g, ...).
_OTHER_MACHINE = re.compile(r"e2-(medium|small|micro)|[a-z]\d[a-z]?-[a-z]+-\d+[a-z]?")
_TPU_PREFIX = re.compile(r"(ct\d+\w*|tpu\d+\w*)-")


def tpu_machine(name: str) -> TpuMachineType | None:
    return CATALOG.get(name)


def is_known_machine_type(name: str) -> bool:
    """A catalogued TPU type or another well-formed machine type; an uncatalogued TPU name is unknown."""
    if name in CATALOG:
        return True
    return not _TPU_PREFIX.match(name) and bool(_OTHER_MACHINE.fullmatch(name))


def offering_zones(machine: TpuMachineType, overrides: Mapping[str, list[str]]) -> tuple[str, ...]:
    """The zones offering this machine type: the configured override (tpuZones) or the documented list."""
    if machine.name in overrides:
        return tuple(overrides[machine.name])
    return machine.zones


def parse_version(version: str) -> tuple[int, ...]:
    """1.33.0-gke.1712000 -> (1, 33, 0, 1712000); a missing gke patch counts as 0."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-gke\.(\d+))?", version.strip())
    if match is None:
        raise ValueError(f"not a GKE version: {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def version_at_least(version: str, minimum: str) -> bool:
    return parse_version(version) >= parse_version(minimum)

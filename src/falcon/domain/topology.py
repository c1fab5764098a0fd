"""TPU generations, machine types and slice shapes: which node pool a topology needs.

Pure data and arithmetic, after shared/reference/gke-compute-k8s-api.md §2 and xpk's
``system_characteristics.py``: ``chips = product(topology)``; a topology that fits one VM is a
single-host slice of exactly one node; otherwise ``nodes = chips / chips_per_vm`` and the pool is
one atomic multi-host slice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from falcon.domain.errors import InvalidSpecError


class Placement(StrEnum):
    """How GKE is told the slice shape of a multi-host pool."""

    NONE = "none"  # single host: GKE rejects tpuTopology here
    TPU_TOPOLOGY = "tpu_topology"  # placementPolicy {type: COMPACT, tpuTopology}
    WORKLOAD_POLICY = "workload_policy"  # TPU7x: placementPolicy.policyName of a workload policy


@dataclass(frozen=True)
class Generation:
    tpu_type: str  # what the job row and the clusters registry say, e.g. "v6e"
    accelerator_label: str  # value of cloud.google.com/gke-tpu-accelerator
    machine_prefix: str  # machine type without the "-<chips>t" suffix
    dims: int  # 2 for 2D torus generations, 3 for 3D
    max_chips: int
    multi_host_placement: Placement
    single_chip_vm: bool  # a 1-chip machine type exists (v5e, v6e: -1t); v5p and TPU7x start at 2x2x1


GENERATIONS: dict[str, Generation] = {
    g.tpu_type: g
    for g in (
        Generation("v5e", "tpu-v5-lite-podslice", "ct5lp-hightpu", 2, 256, Placement.TPU_TOPOLOGY, True),
        Generation("v5p", "tpu-v5p-slice", "ct5p-hightpu", 3, 8960, Placement.TPU_TOPOLOGY, False),
        Generation("v6e", "tpu-v6e-slice", "ct6e-standard", 2, 256, Placement.TPU_TOPOLOGY, True),
        Generation("v7x", "tpu7x", "tpu7x-standard", 3, 9216, Placement.WORKLOAD_POLICY, False),
    )
}

_ALIASES = {"tpu7x": "v7x", "tpu-v7x": "v7x", "v5litepod": "v5e", "trillium": "v6e"}

CHIPS_PER_MULTI_HOST_VM = 4

# Multi-host 2D torus shapes GKE offers for v5e and v6e (§2 of the reference).
_MULTI_HOST_2D = {(2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)}


@dataclass(frozen=True)
class SliceShape:
    """Everything a node pool and a Job need to know about one (tpu_type, topology)."""

    generation: Generation
    topology: str
    chips: int
    nodes: int
    chips_per_node: int

    @property
    def tpu_type(self) -> str:
        return self.generation.tpu_type

    @property
    def machine_type(self) -> str:
        return f"{self.generation.machine_prefix}-{self.chips_per_node}t"

    @property
    def multi_host(self) -> bool:
        return self.nodes > 1

    @property
    def placement(self) -> Placement:
        return self.generation.multi_host_placement if self.multi_host else Placement.NONE


def canonical_tpu_type(tpu_type: str) -> str:
    key = tpu_type.strip().lower()
    return _ALIASES.get(key, key)


_TIMES_SIGNS = str.maketrans({"×": "x", "✕": "x"})


def normalise_topology(topology: str) -> str:
    """The one spelling queues, pool names and GKE use: ``2X4``, `` 2x4 ``, ``2×4``, ``2 x 4`` → ``2x4``.

    Only case, surrounding/inner blanks and the multiplication sign vary; anything else is left
    for ``parse_topology`` to reject, so a typo never silently becomes another shape."""
    return "".join(topology.translate(_TIMES_SIGNS).lower().split())


def parse_topology(topology: str, dims: int) -> tuple[int, ...]:
    parts = normalise_topology(topology).split("x")
    if len(parts) != dims or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        raise InvalidSpecError(f"topology {topology!r} is not {'x'.join(['N'] * dims)}")
    return tuple(int(p) for p in parts)


def resolve_shape(tpu_type: str, topology: str) -> SliceShape:
    """Map a job's (tpu_type, topology) to its slice, or raise InvalidSpecError saying why not.

    The shape carries the normalised topology (``2X4`` → ``2x4``)."""
    generation = GENERATIONS.get(canonical_tpu_type(tpu_type))
    if generation is None:
        known = ", ".join(sorted(GENERATIONS))
        raise InvalidSpecError(f"unknown tpu_type {tpu_type!r} (known: {known})")
    dims = parse_topology(topology, generation.dims)
    topology = "x".join(map(str, dims))
    chips = math.prod(dims)
    if chips > generation.max_chips:
        raise InvalidSpecError(
            f"topology {topology} has {chips} chips, more than {tpu_type} allows ({generation.max_chips})"
        )
    if chips == 1:
        if not generation.single_chip_vm:
            raise InvalidSpecError(f"{tpu_type} has no 1-chip machine type: the smallest slice is 2x2x1")
        return SliceShape(generation, topology, 1, 1, 1)
    if chips <= CHIPS_PER_MULTI_HOST_VM:
        if dims not in ((2, 2), (2, 2, 1)):
            raise InvalidSpecError(f"topology {topology} ({chips} chips) is not a valid {tpu_type} slice")
        return SliceShape(generation, topology, chips, 1, chips)
    _check_multi_host_dims(generation, topology, dims)
    return SliceShape(generation, topology, chips, chips // CHIPS_PER_MULTI_HOST_VM, CHIPS_PER_MULTI_HOST_VM)


def _check_multi_host_dims(generation: Generation, topology: str, dims: tuple[int, ...]) -> None:
    if list(dims) != sorted(dims):
        raise InvalidSpecError(f"topology {topology} must list dimensions in ascending order")
    if generation.dims == 2:
        if dims not in _MULTI_HOST_2D:
            shapes = ", ".join("x".join(map(str, d)) for d in sorted(_MULTI_HOST_2D))
            raise InvalidSpecError(f"topology {topology} is not a {generation.tpu_type} slice ({shapes})")
        return
    small = {(2, 2, 2), (2, 2, 4), (2, 4, 4)}
    if dims not in small and not all(d % 4 == 0 for d in dims):
        raise InvalidSpecError(
            f"topology {topology}: {generation.tpu_type} dimensions beyond 2x4x4 are multiples of 4"
        )

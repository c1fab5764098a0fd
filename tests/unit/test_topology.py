"""Slice shapes against the TPU table of shared/reference/gke-compute-k8s-api.md §2.

We test: every (generation, machine type, topology) row resolves to the machine type, node
count, chips per node, accelerator label and placement the table gives; tpu_type aliases;
invalid tpu types and topologies raise InvalidSpecError with a message that says what is wrong.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from falcon.domain.errors import InvalidSpecError
from falcon.domain.model import TaskSpec
from falcon.domain.topology import Placement, canonical_tpu_type, normalise_topology, resolve_shape

NONE = Placement.NONE
TOPO = Placement.TPU_TOPOLOGY
POLICY = Placement.WORKLOAD_POLICY


def row(
    tpu_type: str,
    topology: str,
    machine: str,
    nodes: int,
    per_node: int,
    placement: Placement,
    marks: Collection[pytest.MarkDecorator] = (),
) -> object:
    """One row of the reference table as a named case: 'v6e 4x4 -> 4 x ct6e-standard-4t'."""
    case_id = f"{tpu_type} {topology} -> {nodes} x {machine}"
    return pytest.param(tpu_type, topology, machine, nodes, per_node, placement, id=case_id, marks=marks)


@pytest.mark.parametrize(
    ("tpu_type", "topology", "machine", "nodes", "per_node", "placement"),
    [
        # v5e
        row("v5e", "1x1", "ct5lp-hightpu-1t", 1, 1, NONE),
        row("v5e", "2x2", "ct5lp-hightpu-4t", 1, 4, NONE),
        row("v5e", "2x4", "ct5lp-hightpu-4t", 2, 4, TOPO),
        row("v5e", "4x4", "ct5lp-hightpu-4t", 4, 4, TOPO),
        row("v5e", "4x8", "ct5lp-hightpu-4t", 8, 4, TOPO),
        row("v5e", "8x8", "ct5lp-hightpu-4t", 16, 4, TOPO),
        row("v5e", "8x16", "ct5lp-hightpu-4t", 32, 4, TOPO),
        row("v5e", "16x16", "ct5lp-hightpu-4t", 64, 4, TOPO),
        # v5p
        row("v5p", "2x2x1", "ct5p-hightpu-4t", 1, 4, NONE),
        row("v5p", "2x2x2", "ct5p-hightpu-4t", 2, 4, TOPO),
        row("v5p", "2x2x4", "ct5p-hightpu-4t", 4, 4, TOPO),
        row("v5p", "2x4x4", "ct5p-hightpu-4t", 8, 4, TOPO),
        row("v5p", "4x4x4", "ct5p-hightpu-4t", 16, 4, TOPO),
        row("v5p", "4x4x8", "ct5p-hightpu-4t", 32, 4, TOPO),
        row("v5p", "4x8x8", "ct5p-hightpu-4t", 64, 4, TOPO),
        row("v5p", "8x8x8", "ct5p-hightpu-4t", 128, 4, TOPO),
        row("v5p", "16x16x24", "ct5p-hightpu-4t", 1536, 4, TOPO),
        row("v5p", "16x20x28", "ct5p-hightpu-4t", 2240, 4, TOPO),  # 140 cubes, the maximum
        # v6e
        row("v6e", "1x1", "ct6e-standard-1t", 1, 1, NONE),
        row("v6e", "2x2", "ct6e-standard-4t", 1, 4, NONE),
        row("v6e", "2x4", "ct6e-standard-4t", 2, 4, TOPO),
        row("v6e", "4x4", "ct6e-standard-4t", 4, 4, TOPO),
        row("v6e", "4x8", "ct6e-standard-4t", 8, 4, TOPO),
        row("v6e", "8x8", "ct6e-standard-4t", 16, 4, TOPO),
        row("v6e", "8x16", "ct6e-standard-4t", 32, 4, TOPO),
        row("v6e", "16x16", "ct6e-standard-4t", 64, 4, TOPO),
        # TPU7x
        row("v7x", "2x2x1", "tpu7x-standard-4t", 1, 4, NONE),
        row("v7x", "2x2x2", "tpu7x-standard-4t", 2, 4, POLICY),
        row("v7x", "2x2x4", "tpu7x-standard-4t", 4, 4, POLICY),
        row("v7x", "2x4x4", "tpu7x-standard-4t", 8, 4, POLICY),
        row("v7x", "4x4x4", "tpu7x-standard-4t", 16, 4, POLICY),
        row("v7x", "4x4x8", "tpu7x-standard-4t", 32, 4, POLICY),
        row("v7x", "4x8x8", "tpu7x-standard-4t", 64, 4, POLICY),
        row("v7x", "8x8x8", "tpu7x-standard-4t", 128, 4, POLICY),
        row("v7x", "16x24x24", "tpu7x-standard-4t", 2304, 4, POLICY),  # 144 cubes, the maximum
    ],
)
def test_reference_table_rows(
    tpu_type: str, topology: str, machine: str, nodes: int, per_node: int, placement: Placement
) -> None:
    shape = resolve_shape(tpu_type, topology)
    assert (shape.machine_type, shape.nodes, shape.chips_per_node, shape.placement) == (
        machine,
        nodes,
        per_node,
        placement,
    )
    assert shape.chips == nodes * per_node
    assert shape.multi_host is (nodes > 1)


@pytest.mark.parametrize(
    ("tpu_type", "label"),
    [
        pytest.param("v5e", "tpu-v5-lite-podslice", id="v5e"),
        pytest.param("v5p", "tpu-v5p-slice", id="v5p"),
        pytest.param("v6e", "tpu-v6e-slice", id="v6e"),
        pytest.param("v7x", "tpu7x", id="TPU7x"),
    ],
)
def test_accelerator_label(tpu_type: str, label: str) -> None:
    shape = resolve_shape(tpu_type, "1x1" if tpu_type in ("v5e", "v6e") else "2x2x1")
    assert shape.generation.accelerator_label == label


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        pytest.param("tpu7x", "v7x", id="tpu7x"),
        pytest.param("TPU-v7x", "v7x", id="tpu-v7x, upper case"),
        pytest.param(" v6e ", "v6e", id="whitespace"),
        pytest.param("Trillium", "v6e", id="trillium"),
        pytest.param("v5litepod", "v5e", id="v5litepod"),
        pytest.param("v9z", "v9z", id="unknown passes through"),
    ],
)
def test_canonical_tpu_type(alias: str, canonical: str) -> None:
    assert canonical_tpu_type(alias) == canonical


def test_alias_resolves_like_the_canonical_name() -> None:
    assert resolve_shape("tpu7x", "2x2x2") == resolve_shape("v7x", "2x2x2")


@pytest.mark.parametrize(
    ("tpu_type", "topology", "message"),
    [
        pytest.param("v4", "2x2x2", r"unknown tpu_type 'v4' \(known: v5e, v5p, v6e, v7x\)", id="unknown tpu"),
        pytest.param("", "2x2", r"unknown tpu_type ''", id="empty tpu"),
        pytest.param("v6e", "2x2x2", r"topology '2x2x2' is not NxN", id="3D topology on a 2D generation"),
        pytest.param("v7x", "4x4", r"topology '4x4' is not NxNxN", id="2D topology on a 3D generation"),
        pytest.param("v6e", "", r"topology '' is not NxN", id="empty topology"),
        pytest.param("v6e", "axb", r"topology 'axb' is not NxN", id="not numbers"),
        pytest.param("v6e", "0x4", r"topology '0x4' is not NxN", id="zero dimension"),
        pytest.param("v6e", "-2x4", r"topology '-2x4' is not NxN", id="negative dimension"),
        pytest.param("v6e", "2*4", r"topology '2\*4' is not NxN", id="wrong separator"),
        pytest.param("v5p", "1x1x1", r"v5p has no 1-chip machine type", id="v5p has no -1t"),
        pytest.param("v7x", "1x1x1", r"v7x has no 1-chip machine type", id="TPU7x has no -1t"),
        pytest.param("v6e", "1x2", r"topology 1x2 \(2 chips\) is not a valid v6e slice", id="two chips"),
        pytest.param("v5e", "1x3", r"topology 1x3 \(3 chips\) is not a valid v5e slice", id="three chips"),
        pytest.param("v6e", "4x2", r"topology 4x2 must list dimensions in ascending order", id="descending"),
        pytest.param("v6e", "2x8", r"topology 2x8 is not a v6e slice \(.*4x8.*\)", id="2D shape GKE lacks"),
        pytest.param("v6e", "32x32", r"1024 chips, more than v6e allows \(256\)", id="beyond v6e pod"),
        pytest.param("v5p", "2x2x8", r"v5p dimensions beyond 2x4x4 are multiples of 4", id="v5p not x4"),
        pytest.param("v7x", "4x4x6", r"v7x dimensions beyond 2x4x4 are multiples of 4", id="v7x not x4"),
        pytest.param("v5p", "16x20x32", r"10240 chips, more than v5p allows \(8960\)", id="beyond 140 cubes"),
        pytest.param("v7x", "16x24x28", r"10752 chips, more than v7x allows \(9216\)", id="beyond 144 cubes"),
    ],
)
def test_invalid_inputs_say_why(tpu_type: str, topology: str, message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        resolve_shape(tpu_type, topology)


@pytest.mark.parametrize(
    ("tpu_type", "topology"),
    [pytest.param("v6e", "1x4", id="v6e 1x4"), pytest.param("v7x", "1x1x4", id="v7x 1x1x4")],
)
def test_four_chip_shapes_outside_the_table_are_rejected(tpu_type: str, topology: str) -> None:
    with pytest.raises(InvalidSpecError):
        resolve_shape(tpu_type, topology)


@pytest.mark.parametrize(
    ("tpu_type", "written", "canonical"),
    [
        pytest.param("v6e", "2X4", "2x4", id="upper case X"),
        pytest.param("v6e", " 2x4 ", "2x4", id="surrounding blanks"),
        pytest.param("v6e", "2×4", "2x4", id="multiplication sign"),
        pytest.param("v6e", "2 x 4", "2x4", id="inner blanks"),
        pytest.param("v6e", "\t4x4\n", "4x4", id="tab and newline"),
        pytest.param("v7x", "2X2×2", "2x2x2", id="mixed 3D spellings"),
    ],
)
def test_topology_spellings_normalise_to_one_queue_name(tpu_type: str, written: str, canonical: str) -> None:
    assert normalise_topology(written) == canonical
    shape = resolve_shape(tpu_type, written)
    assert shape.topology == canonical
    assert shape == resolve_shape(tpu_type, canonical)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        pytest.param("2x4x", r"topology '2x4x' is not NxN", id="trailing separator"),
        pytest.param("2,4", r"topology '2,4' is not NxN", id="comma"),
        pytest.param("２x４", r"topology '２x４' is not NxN", id="full-width digits"),
        pytest.param("2.0x4", r"topology '2.0x4' is not NxN", id="decimal"),
    ],
)
def test_topology_spellings_that_are_not_shapes_are_rejected(written: str, message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        resolve_shape("v6e", written)


def test_the_task_spec_carries_the_normalised_topology() -> None:
    spec = TaskSpec.parse({"image": "i", "command": ["c"], "topology": " 2X4 "})
    assert spec.topology == "2x4"

"""How `falcon tidal …` and `falcon tidal pool …` name a registered cluster: by id, or by a name
no two projects share; an ambiguous or unknown name is a usage error that says what to give."""

from __future__ import annotations

import pytest
import typer
from tests.unit.fakes import cluster

from falcon.cli_db import registered_cluster

REGISTRY = [cluster("c1", name="edge-a"), cluster("c2", name="edge-b"), cluster("c3", name="edge-b")]


@pytest.mark.parametrize(("wanted", "found"), [("edge-a", "c1"), ("c2", "c2"), ("c3", "c3")])
def test_a_cluster_is_named_by_its_id_or_its_unique_name(wanted: str, found: str) -> None:
    assert registered_cluster(REGISTRY, wanted).id == found


@pytest.mark.parametrize(
    ("wanted", "says"),
    [
        ("edge-b", "2 clusters are named edge-b; give the id: c2 (proj/us-east5-b), c3 (proj/us-east5-b)"),
        ("edge-z", "no registered cluster edge-z (falcon cluster list)"),
    ],
)
def test_an_ambiguous_or_unknown_name_is_refused_saying_what_to_give(wanted: str, says: str) -> None:
    with pytest.raises(typer.BadParameter) as refused:
        registered_cluster(REGISTRY, wanted)
    assert str(refused.value) == says

"""The composition root's seam for a process that embeds the flows with its own wiring."""

from __future__ import annotations

from tests.unit.fakes import make_services

from falcon.bootstrap import services, serving


def test_flows_run_on_the_served_services_for_the_block_and_the_outer_ones_after_it() -> None:
    outer, inner = make_services(), make_services()
    with serving(outer):
        with serving(inner):
            assert services() is inner
        assert services() is outer

"""The unit tier's fixture: Services on in-memory fakes and a fixed clock, one cluster ``c1``."""

from __future__ import annotations

import pytest
from tests.unit.fakes import one_cluster

from falcon.services.context import Services


@pytest.fixture
def svc() -> Services:
    return one_cluster()

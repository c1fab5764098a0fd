"""The chaos run's evidence: what a failed run prints of Falcon's log, for a CI machine whose
folder is gone by the time anyone reads the failure."""

from __future__ import annotations

from pathlib import Path

from tests.chaos.run import evidence

LOG = """\
21:47:20.410 | INFO | event=pool_chosen task_id=chaos-0013 pool=falcon-2x4-1a4b6ea1de
21:47:20.886 | INFO | event=hand_over task_id=chaos-0013 pool=falcon-2x4-9808b8c1a3 own=falcon-2x4-1a4b6ea1de
21:47:21.000 | INFO | event=pool_delete_unanswered pool=falcon-2x4-9808b8c1a3 error=timed out
21:47:21.100 | INFO | event=pool_chosen task_id=chaos-0103 pool=falcon-4x4-3c5780a0ba
21:47:22.000 | INFO | event=warm_pools recorded=['falcon-2x4-w3c5780a0ba']
"""


def test_the_evidence_is_the_lines_naming_the_task_or_a_pool_named_beside_it(tmp_path: Path) -> None:
    log = tmp_path / "falcon.log"
    log.write_text(LOG)
    lines = LOG.splitlines()
    assert evidence(log, ["chaos-0013"]) == lines[:3]
    assert evidence(log, ["chaos-0013"], limit=2) == [*lines[:2], "... 1 more lines"]
    assert evidence(log, []) == []
    assert evidence(tmp_path / "none.log", ["chaos-0013"]) == []

"""Retry backoff per kind of call: FALCON_RETRY_* settings become the Prefect task options the
lifecycle flow runs its single-call steps with (``retried``)."""

from __future__ import annotations

from typing import Any

import pytest
from prefect import Task
from pydantic import ValidationError

from falcon.settings import RetryPolicy, Settings
from falcon.tasks import JITTER, provision_node_pool, release_task, retried, retry_on_temporary, submit_job


def test_env_vars_set_each_kinds_tries_base_and_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "FALCON_RETRY_NODE_POOL_TRIES": "4",
        "FALCON_RETRY_NODE_POOL_BASE_SECONDS": "1",
        "FALCON_RETRY_NODE_POOL_CAP_SECONDS": "3",
        "FALCON_RETRY_JOB_TRIES": "2",
        "FALCON_RETRY_JOB_BASE_SECONDS": "0.5",
        "FALCON_RETRY_RELEASE_TRIES": "9",
        "FALCON_RETRY_RELEASE_CAP_SECONDS": "120",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.node_pool_retry == RetryPolicy(tries=4, base_seconds=1.0, cap_seconds=3.0)
    assert settings.job_retry == RetryPolicy(tries=2, base_seconds=0.5, cap_seconds=60.0)
    assert settings.release_retry == RetryPolicy(tries=9, base_seconds=2.0, cap_seconds=120.0)


def test_defaults_keep_five_retries_doubling_from_two_seconds() -> None:
    settings = Settings()
    for policy in (settings.node_pool_retry, settings.job_retry, settings.release_retry):
        assert policy.delays() == [2.0, 4.0, 8.0, 16.0, 32.0]


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (RetryPolicy(tries=8, base_seconds=10, cap_seconds=60), [10, 20, 40, 60, 60, 60, 60]),
        (RetryPolicy(tries=3, base_seconds=0, cap_seconds=60), [0, 0]),
        (RetryPolicy(tries=1, base_seconds=5, cap_seconds=60), []),
    ],
    ids=["held at the cap", "no delay", "a single try"],
)
def test_delays_double_from_the_base_and_stop_at_the_cap(policy: RetryPolicy, delays: list[float]) -> None:
    assert policy.delays() == delays


@pytest.mark.parametrize("tries", [0, 52])
def test_tries_outside_what_prefect_takes_are_refused(tries: int) -> None:
    with pytest.raises(ValidationError, match="retry_job_tries"):
        Settings(retry_job_tries=tries)


@pytest.mark.parametrize("step", [provision_node_pool, submit_job, release_task], ids=lambda t: t.name)
def test_retried_gives_the_step_the_policys_options_and_retries_only_temporary_errors(
    step: Task[..., Any],
) -> None:
    configured = retried(step, RetryPolicy(tries=4, base_seconds=1.5, cap_seconds=4))
    assert (configured.name, configured.retries, configured.retry_delay_seconds) == (
        step.name,
        3,
        [1.5, 3.0, 4.0],
    )
    assert (configured.retry_jitter_factor, configured.retry_condition_fn) == (JITTER, retry_on_temporary)
    assert step.retries == 0  # the decorated step itself is left as it was

"""The message template table and the Waiting message.

We test: every MessageKey has a template in both locales and the two take the same
placeholders; each row of the design's §9 Status/Reason/Message table renders word for word;
the Waiting message names up to three tasks ahead and counts the rest.
"""

from __future__ import annotations

from string import Formatter

import pytest

from falcon.domain.messages import AHEAD_PREVIEW, TEMPLATES, Locale, MessageKey, render, waiting_message


def placeholders(template: str) -> set[str]:
    return {field for _, field, _, _ in Formatter().parse(template) if field is not None}


@pytest.mark.parametrize("key", list(MessageKey), ids=str)
def test_every_key_has_both_locales_with_the_same_placeholders(key: MessageKey) -> None:
    templates = TEMPLATES[key]
    assert set(templates) == set(Locale)
    assert placeholders(templates[Locale.ZH]) == placeholders(templates[Locale.EN])


def test_no_template_without_a_key() -> None:
    assert set(TEMPLATES) == set(MessageKey)


@pytest.mark.parametrize(
    ("key", "params", "expected"),
    [
        pytest.param(
            MessageKey.PROVISIONING_RESERVATION,
            {"reservation": "ghostfish-kankgdm2b4m7f"},
            "正在创建 node pool (reservation: ghostfish-kankgdm2b4m7f)...",
            id="Pending/Provisioning",
        ),
        pytest.param(
            MessageKey.PROVISIONING_FALLBACK,
            {},
            "reservation 剩余不足，fallback 到 flex-start 创建 node pool...",
            id="Pending/ProvisioningFallback",
        ),
        pytest.param(
            MessageKey.DISPATCHING, {}, "Node pool 就绪，正在提交 K8s Job...", id="Pending/Dispatching"
        ),
        pytest.param(MessageKey.RUNNING, {"active": 1, "total": 1}, "Pod 运行中 (1/1 active)", id="Running"),
        pytest.param(MessageKey.SUCCEEDED, {}, "", id="Succeeded"),
        pytest.param(
            MessageKey.NODE_POOL_TIMEOUT,
            {"minutes": 10, "detail": "GKE API timeout"},
            "node pool 创建超时 (10m): GKE API timeout",
            id="Failed/NodePoolTimeout",
        ),
        pytest.param(
            MessageKey.NODE_POOL_FAILED,
            {"detail": "quota 'TPUS_PER_PROJECT' exceeded"},
            "node pool 创建失败: quota 'TPUS_PER_PROJECT' exceeded",
            id="Failed/NodePoolFailed",
        ),
        pytest.param(
            MessageKey.JOB_SUBMIT_FAILED,
            {"detail": "admission webhook denied"},
            "K8s Job 提交失败: admission webhook denied",
            id="Failed/JobSubmitFailed",
        ),
        pytest.param(
            MessageKey.JOB_FAILED,
            {"detail": "Pod terminated: OOMKilled (exit code 137)"},
            "Pod terminated: OOMKilled (exit code 137)",
            id="Failed/JobFailed",
        ),
        pytest.param(
            MessageKey.TIMEOUT, {"seconds": 3600}, "任务超时 (3600s)，已取消 Job", id="Failed/Timeout"
        ),
        pytest.param(
            MessageKey.ABORTING, {}, "正在中止，等待 K8s Job 删除和 node pool 清理...", id="Aborting"
        ),
        pytest.param(MessageKey.ABORTED, {}, "用户中止", id="Aborted"),
    ],
)
def test_design_table_examples(key: MessageKey, params: dict[str, object], expected: str) -> None:
    assert render(key, Locale.ZH, **params) == expected


@pytest.mark.parametrize(
    ("position", "ahead", "ahead_count", "locale", "expected"),
    [
        pytest.param(
            3,
            [("user-a", "profiling-v7x"), ("user-b", "benchmark-v7x")],
            2,
            Locale.ZH,
            "队列位置 #3，前面有 2 个任务 (user-a: profiling-v7x, user-b: benchmark-v7x)",
            id="design example",
        ),
        pytest.param(
            3,
            [("user-a", "profiling-v7x"), ("user-b", "benchmark-v7x")],
            2,
            Locale.EN,
            "Queue position #3, 2 task(s) ahead (user-a: profiling-v7x, user-b: benchmark-v7x)",
            id="design example in English",
        ),
        pytest.param(1, [], 0, Locale.ZH, "队列位置 #1，等待当前任务获取资源", id="first in line"),
        pytest.param(
            6,
            [("a", "j1"), ("b", "j2"), ("c", "j3")],
            5,
            Locale.ZH,
            "队列位置 #6，前面有 5 个任务 (a: j1, b: j2, c: j3, …+2)",
            id="three named, rest counted",
        ),
        pytest.param(
            5,
            [("a", "j1"), ("b", "j2"), ("c", "j3"), ("d", "j4")],
            4,
            Locale.ZH,
            "队列位置 #5，前面有 4 个任务 (a: j1, b: j2, c: j3, …+1)",
            id="longer preview than allowed is cut to three",
        ),
    ],
)
def test_waiting_message(
    position: int, ahead: list[tuple[str, str]], ahead_count: int, locale: Locale, expected: str
) -> None:
    assert waiting_message(position, ahead, ahead_count, locale) == expected


def test_preview_length_is_three() -> None:
    assert AHEAD_PREVIEW == 3

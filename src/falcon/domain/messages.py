"""Every human-readable Message Falcon writes, from one template table.

The design's language (Chinese) is the default; ``FALCON_MESSAGE_LOCALE=en`` selects English.
Upstream shows these strings to users as they are, so they stay short and specific.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Locale(StrEnum):
    ZH = "zh"
    EN = "en"


class MessageKey(StrEnum):
    WAITING = "waiting"
    WAITING_FIRST = "waiting_first"
    CLUSTER_UNREACHABLE = "cluster_unreachable"
    PROVISIONING_STARTED = "provisioning_started"
    PROVISIONING_RESERVATION = "provisioning_reservation"
    PROVISIONING_FLEX_START = "provisioning_flex_start"
    PROVISIONING_FALLBACK = "provisioning_fallback"
    PROVISIONING_REUSE = "provisioning_reuse"
    PROVISIONING_WARM = "provisioning_warm"
    DISPATCHING = "dispatching"
    PODS_PENDING = "pods_pending"
    RUNNING = "running"
    RELEASING = "releasing"
    SUCCEEDED = "succeeded"
    INVALID_SPEC = "invalid_spec"
    NO_ELIGIBLE_CLUSTER = "no_eligible_cluster"
    NODE_POOL_TIMEOUT = "node_pool_timeout"
    NODE_POOL_FAILED = "node_pool_failed"
    JOB_SUBMIT_FAILED = "job_submit_failed"
    JOB_FAILED = "job_failed"
    JOB_VANISHED = "job_vanished"
    PODS_CANNOT_START = "pods_cannot_start"
    TIMEOUT = "timeout"
    ABORTING = "aborting"
    ABORTED = "aborted"
    NODE_POOL_DELETE_FAILED = "node_pool_delete_failed"


TEMPLATES: dict[MessageKey, dict[Locale, str]] = {
    MessageKey.WAITING: {
        Locale.ZH: "队列位置 #{position}，前面有 {ahead_count} 个任务 ({ahead})",
        Locale.EN: "Queue position #{position}, {ahead_count} task(s) ahead ({ahead})",
    },
    MessageKey.WAITING_FIRST: {
        Locale.ZH: "队列位置 #1，等待当前任务获取资源",
        Locale.EN: "Queue position #1, waiting for the current task to acquire its resources",
    },
    MessageKey.CLUSTER_UNREACHABLE: {
        Locale.ZH: "集群 {cluster} 自 {since} 起无法访问，任务在队列中等待: {detail}",
        Locale.EN: "Cluster {cluster} unreachable since {since}; the task waits in its queue: {detail}",
    },
    MessageKey.PROVISIONING_STARTED: {
        Locale.ZH: "已获得队列槽位，正在准备 node pool...",
        Locale.EN: "Got the queue slot, preparing a node pool...",
    },
    MessageKey.PROVISIONING_RESERVATION: {
        Locale.ZH: "正在创建 node pool (reservation: {reservation})...",
        Locale.EN: "Creating node pool (reservation: {reservation})...",
    },
    MessageKey.PROVISIONING_FLEX_START: {
        Locale.ZH: "正在创建 node pool (flex-start)...",
        Locale.EN: "Creating node pool (flex-start)...",
    },
    MessageKey.PROVISIONING_FALLBACK: {
        Locale.ZH: "reservation 剩余不足，fallback 到 flex-start 创建 node pool...",
        Locale.EN: "Reservation has too little room left, falling back to a flex-start node pool...",
    },
    MessageKey.PROVISIONING_REUSE: {
        Locale.ZH: "复用空闲 node pool {pool}...",
        Locale.EN: "Reusing idle node pool {pool}...",
    },
    MessageKey.PROVISIONING_WARM: {
        Locale.ZH: "复用预热 node pool {pool} (tidal 规则 {rule})...",
        Locale.EN: "Reusing warm node pool {pool} (tidal rule {rule})...",
    },
    MessageKey.DISPATCHING: {
        Locale.ZH: "Node pool 就绪，正在提交 K8s Job...",
        Locale.EN: "Node pool ready, submitting the Kubernetes Job...",
    },
    MessageKey.PODS_PENDING: {
        Locale.ZH: "K8s Job 已提交，等待 Pod 运行 ({running}/{total} running){detail}",
        Locale.EN: "Kubernetes Job submitted, waiting for pods ({running}/{total} running){detail}",
    },
    MessageKey.RUNNING: {
        Locale.ZH: "Pod 运行中 ({active}/{total} active)",
        Locale.EN: "Pods running ({active}/{total} active)",
    },
    MessageKey.RELEASING: {
        Locale.ZH: "Job 已结束，正在清理 node pool...",
        Locale.EN: "Job finished, cleaning up the node pool...",
    },
    MessageKey.SUCCEEDED: {Locale.ZH: "", Locale.EN: ""},
    MessageKey.INVALID_SPEC: {
        Locale.ZH: "任务参数无效: {detail}",
        Locale.EN: "Invalid task: {detail}",
    },
    MessageKey.NO_ELIGIBLE_CLUSTER: {
        Locale.ZH: "没有提供 {tpu_type} 的 active 集群",
        Locale.EN: "No active cluster offers {tpu_type}",
    },
    MessageKey.NODE_POOL_TIMEOUT: {
        Locale.ZH: "node pool 创建超时 ({minutes}m): {detail}",
        Locale.EN: "Node pool creation timed out ({minutes}m): {detail}",
    },
    MessageKey.NODE_POOL_FAILED: {
        Locale.ZH: "node pool 创建失败: {detail}",
        Locale.EN: "Node pool creation failed: {detail}",
    },
    MessageKey.JOB_SUBMIT_FAILED: {
        Locale.ZH: "K8s Job 提交失败: {detail}",
        Locale.EN: "Kubernetes Job submission failed: {detail}",
    },
    MessageKey.JOB_FAILED: {
        Locale.ZH: "{detail}",
        Locale.EN: "{detail}",
    },
    MessageKey.JOB_VANISHED: {
        Locale.ZH: "K8s Job {job} 在集群中消失",
        Locale.EN: "Kubernetes Job {job} disappeared from the cluster",
    },
    MessageKey.PODS_CANNOT_START: {
        Locale.ZH: "Pod 无法启动: {detail}",
        Locale.EN: "Pods cannot start: {detail}",
    },
    MessageKey.TIMEOUT: {
        Locale.ZH: "任务超时 ({seconds}s)，已取消 Job",
        Locale.EN: "Task timed out ({seconds}s), Job cancelled",
    },
    MessageKey.ABORTING: {
        Locale.ZH: "正在中止，等待 K8s Job 删除和 node pool 清理...",
        Locale.EN: "Aborting, waiting for the Kubernetes Job deletion and node pool cleanup...",
    },
    MessageKey.ABORTED: {Locale.ZH: "用户中止", Locale.EN: "Aborted by user"},
    MessageKey.NODE_POOL_DELETE_FAILED: {
        Locale.ZH: "{message}（node pool 删除失败: {detail}）",
        Locale.EN: "{message} (node pool deletion failed: {detail})",
    },
}

AHEAD_PREVIEW = 3  # how many tasks ahead a Waiting message names before summarising


def render(key: MessageKey, locale: Locale = Locale.ZH, /, **params: object) -> str:
    return TEMPLATES[key][locale].format(**params).strip()


@dataclass(frozen=True)
class Messages:
    """The templates bound to one locale, once: ``say(MessageKey.RUNNING, active=4, total=4)``."""

    locale: Locale = Locale.ZH

    def __call__(self, key: MessageKey, /, **params: object) -> str:
        return render(key, self.locale, **params)


def waiting_message(
    position: int, ahead: Sequence[tuple[str, str]], ahead_count: int, locale: Locale = Locale.ZH
) -> str:
    """``队列位置 #3，前面有 2 个任务 (user-a: profiling-v7x, user-b: benchmark-v7x)``.

    ``ahead`` is (actor, task name) of the first tasks ahead in pick order; at most
    AHEAD_PREVIEW are named, the rest are counted.
    """
    if ahead_count == 0:
        return render(MessageKey.WAITING_FIRST, locale)
    named = ", ".join(f"{actor}: {name}" for actor, name in ahead[:AHEAD_PREVIEW])
    rest = ahead_count - min(len(ahead), AHEAD_PREVIEW)
    if rest > 0:
        named += f", …+{rest}"
    return render(MessageKey.WAITING, locale, position=position, ahead_count=ahead_count, ahead=named)

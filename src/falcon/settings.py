"""All of Falcon's settings in one typed object, read from ``FALCON_*`` environment variables.

Grouped by concern; every value has a default that runs the embedded local stack (SQLite file,
local Prefect server, emulator). Secrets never live here: GCP credentials come from a Prefect
``GcpCredentials`` block (empty = Application Default Credentials = Workload Identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from pydantic import Field, computed_field
from pydantic_settings import BaseSettings, SettingsConfigDict

from falcon.domain.messages import Locale
from falcon.domain.pool_economics import MAX_START_DELAY_WEIGHT


class LogLevel(StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


class RunsIn(StrEnum):
    """Where the per-task and warm flow runs execute (``adapters/runs.py``)."""

    DISPATCHER = "dispatcher"  # threads of the dispatcher's process: no process start, one process
    DEPLOYMENTS = "deployments"  # run_deployment: a process or pod per run, as the work pool runs it


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff of one kind of call: ``tries`` attempts in all, the delays before the retries
    doubling from ``base_seconds`` and held at ``cap_seconds`` (Prefect adds its jitter)."""

    tries: int
    base_seconds: float
    cap_seconds: float

    def delays(self) -> list[float]:
        return [min(self.cap_seconds, self.base_seconds * 2**n) for n in range(self.tries - 1)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FALCON_", extra="ignore")

    # -- where things are
    home: Path = Field(default=Path(".falcon"), description="local state: SQLite file, emulator data")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite in home")
    emulator_url: str | None = Field(
        default=None, description="http://127.0.0.1:PORT: point GKE, Compute and Kubernetes clients here"
    )
    gcp_credentials_block: str | None = Field(
        default=None, description="name of a prefect-gcp GcpCredentials block; unset = ADC"
    )
    message_locale: Locale = Locale.ZH
    log_level: LogLevel = Field(
        default=LogLevel.INFO, description="level of Falcon's loggers (falcon.*): INFO logs every task move"
    )

    # -- dispatcher loop
    tick_seconds: float = Field(default=0.5, gt=0, description="how often the dispatcher polls the job table")
    reconcile_seconds: float = Field(default=1.0, gt=0, description="how often running Jobs are followed")
    job_watch_seconds: int = Field(
        default=60,
        ge=0,
        description="the dispatcher follows each cluster's Jobs, and Falcon's pods, with watches whose "
        "requests last this long, and asks the API server for one Job when it fell silent, to know it "
        "answers; 0 lists them every round",
    )
    dispatcher_run_seconds: float = Field(
        default=3540.0,
        gt=0,
        description="one dispatcher flow run loops this long, then the next run takes over",
    )
    intake_batch: int = Field(default=500, gt=0)
    queue_refresh_seconds: float = Field(
        default=30.0,
        gt=0,
        description="how often the dispatcher counts the waiting tasks per queue against its book"
        " (a safety net: a difference, and every tenth count, reads them all again)",
    )
    runs_in: RunsIn = Field(
        default=RunsIn.DISPATCHER,
        description="where lifecycle, release and warm flow runs execute: dispatcher threads or deployments",
    )
    run_threads: int = Field(
        default=32, ge=1, le=1024, description="flow runs executing at once in the dispatcher's process"
    )
    run_stop_seconds: float = Field(
        default=5.0, ge=0, description="at a dispatcher run's end, how long its flow runs get to stop"
    )

    # -- health and readiness of the dispatcher's process (Kubernetes probes)
    health_port: int = Field(
        default=0, ge=0, le=65535, description="serve GET /livez and /readyz on this port; 0 = off"
    )
    # A tick may legitimately wait out a few API timeouts (an unreachable cluster's Job list):
    # liveness must not restart the process for that, only for a loop that stopped.
    liveness_seconds: float = Field(
        default=120.0, gt=0, description="/livez fails once the dispatcher loop has not ticked this long"
    )
    readiness_timeout_seconds: float = Field(
        default=3.0, gt=0, description="each /readyz check (database, Prefect API) must answer within this"
    )

    # -- queue slots (Prefect global concurrency limits)
    slot_lease_seconds: int = Field(default=300, ge=60, le=86400)

    # -- node pools
    # Google's own Workflows connector for nodePools.create waits 1800 s by default, and large
    # multi-host TPU slices take GKE tens of minutes; a stockout is not waited out (it is final).
    node_pool_timeout_seconds: int = Field(
        default=1800, gt=0, description="create (and delete) of one node pool must finish within this"
    )
    # GKE documents 5-10 minutes for a TPU slice; Falcon then learns each queue's own times.
    pool_creation_prior_seconds: float = Field(
        default=300.0,
        gt=0,
        le=366 * 24 * 3600,
        description="a pool creation's assumed duration until a queue has observed some",
    )
    pool_start_delay_weight: float = Field(
        default=0.0,
        ge=0,
        le=MAX_START_DELAY_WEIGHT,
        description="node-minutes (per node of the pool) a minute of a task's start delay is worth when"
        " deciding to keep an idle pool: 0 counts node-time alone; higher keeps pools longer so tasks"
        " start sooner, for more node-hours",
    )
    pool_busy_wait_chance: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="a task about to create a pool waits for a busy pool of its queue while the chance"
        " that one frees before a new pool would be ready is at least this (0: any chance); unset:"
        " never. Fewer creations and node-hours, later starts",
    )
    orphan_scan_seconds: float = Field(
        default=300.0, gt=0, description="how often GKE is scanned for orphans"
    )
    view_seconds: float = Field(
        default=10.0,
        ge=0,
        description="how often the dispatcher publishes its view (queues, reservation room, node pools) as a"
        " Prefect table artifact and as /metrics gauges; 0 = never",
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="poll interval for GKE operations and pods")
    gke_busy_retry_seconds: float = Field(
        default=5.0,
        gt=0,
        description="wait before asking GKE again to create a node pool it refused because another"
        " operation holds the cluster (an acquiring task still polls for a hand-over meanwhile)",
    )
    gke_operations_per_cluster: int = Field(
        default=5,
        ge=1,
        description="node-pool operations GKE runs at once on one cluster: its quota (GKE documents one"
        " operation per node pool, different pools side by side; 429 past the quota) asks a creation at"
        " once; 1 (a cluster that refuses any other operation with 400 FAILED_PRECONDITION) makes a"
        " creation let the cluster's marked deletions go first",
    )
    api_timeout_seconds: float = Field(default=30.0, gt=0)

    # -- Jobs
    gcs_mount_path: str = "/gcs"
    job_service_account: str | None = Field(default=None, description="KSA with access to the log bucket")
    image_pull_grace_seconds: float = Field(
        default=60.0, gt=0, description="a pod failing to pull its image this long ends its task"
    )
    mount_grace_seconds: float = Field(
        default=300.0, gt=0, description="a pod failing a retryable volume mount this long ends its task"
    )

    # -- retry backoff per kind of call (design Phase 2): the steps that make single calls are
    #    retried by Prefect on TemporaryError; ``tries`` counts every attempt, the first included
    #    (Prefect takes at most 50 retry delays), delays double from ``base`` up to ``cap``.
    retry_node_pool_tries: int = Field(default=6, ge=1, le=51, description="provision: Compute reads, pool")
    retry_node_pool_base_seconds: float = Field(default=2.0, ge=0)
    retry_node_pool_cap_seconds: float = Field(default=60.0, ge=0)
    retry_job_tries: int = Field(default=6, ge=1, le=51, description="submit: namespace, Service, Job")
    retry_job_base_seconds: float = Field(default=2.0, ge=0)
    retry_job_cap_seconds: float = Field(default=60.0, ge=0)
    retry_release_tries: int = Field(default=6, ge=1, le=51, description="release: Job, pool, outcome")
    retry_release_base_seconds: float = Field(default=2.0, ge=0)
    retry_release_cap_seconds: float = Field(default=60.0, ge=0)

    # -- tidal warm pools
    warm_retry_seconds: float = Field(
        default=600.0,
        ge=0,
        description="after a warm pool failed to be created (stockout, unusable reservation), its "
        "queue is not warmed again for this long",
    )

    # -- the TidalScheduler controller (oFEP-0033)
    tidal_health_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="the tidal controller's /livez, /readyz, /metrics port; 0 = off (its own: falcon local "
        "runs it beside the dispatcher)",
    )
    tidal_catch_up_seconds: int = Field(
        default=86400,
        ge=1,
        description="after downtime the latest missed fire is applied if at most this old (like a "
        "CronJob's startingDeadlineSeconds)",
    )
    tidal_scale_targets: bool = Field(
        default=False, description="patch every target's /scale at a fire, not only annotated objects'"
    )
    tidal_run_seconds: float = Field(
        default=3540.0, gt=0, description="one controller flow run follows the clusters this long"
    )
    tidal_watch_seconds: int = Field(
        default=60, gt=0, description="each watch request lasts at most this long, then resumes"
    )
    tidal_retry_seconds: float = Field(
        default=30.0,
        gt=0,
        description="a missing target is looked for again after this; a failed evaluation after 0.5 s, "
        "doubling up to this",
    )
    tidal_cluster_refresh_seconds: float = Field(
        default=60.0, gt=0, description="how often the registry is read for clusters to follow"
    )
    tidal_workers_per_cluster: int = Field(
        default=8, gt=0, description="evaluations (API calls) under way at once on one cluster"
    )

    @property
    def node_pool_retry(self) -> RetryPolicy:
        return RetryPolicy(
            self.retry_node_pool_tries, self.retry_node_pool_base_seconds, self.retry_node_pool_cap_seconds
        )

    @property
    def job_retry(self) -> RetryPolicy:
        return RetryPolicy(self.retry_job_tries, self.retry_job_base_seconds, self.retry_job_cap_seconds)

    @property
    def release_retry(self) -> RetryPolicy:
        return RetryPolicy(
            self.retry_release_tries, self.retry_release_base_seconds, self.retry_release_cap_seconds
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.home / 'falcon.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings of this process, read once; tests call ``get_settings.cache_clear()`` after changing env."""
    return Settings()

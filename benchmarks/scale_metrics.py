"""What bench_scale.py measures beside the job table: the dispatcher's tick and reconcile histograms from its
``/metrics`` page, and the memory and CPU time of process trees.

The histogram is cumulative since the dispatcher's process started, so a window's distribution is
the difference of two scrapes; its quantiles are interpolated linearly inside the bucket that holds
them, as Prometheus' ``histogram_quantile`` does, and are only as fine as that bucket: the bucket's
bounds are reported with each quantile.

Memory: PSS (proportional set size: a page shared by n processes counts 1/n in each) where the
kernel reports it, so forked flow-run processes sharing their parent's pages are not counted twice;
RSS beside it (shared pages counted in every process that maps them).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psutil
from prometheus_client.parser import text_string_to_metric_families

TICK_METRIC = "falcon_dispatcher_tick_seconds"
MESSAGES_METRIC = "falcon_dispatcher_messages_seconds"
RECONCILE_METRIC = "falcon_dispatcher_reconcile_seconds"  # the loop beside the tick
HOUSEKEEPING_METRIC = "falcon_dispatcher_housekeeping_seconds"  # the other loop beside it
STEP_METRIC = "falcon_dispatcher_step_seconds"  # the steps of a tick or round, by loop
GC_METRIC = "falcon_gc_pause_seconds"  # the dispatcher process's garbage collections, by generation
DEFERRED_METRIC = "falcon_picks_deferred"  # picks left to the next tick: Prefect answered busy, or not at all
API_CALLS_METRIC = "falcon_api_calls"  # GKE, Compute and Kubernetes calls, by api, call and outcome
API_SECONDS_METRIC = "falcon_api_call_seconds"  # one such call's wall time, by api and call


@dataclass(frozen=True)
class Histogram:
    """One labelled series of a Prometheus histogram: cumulative counts per upper bound."""

    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending le, ends with +Inf
    count: float
    total: float

    def since(self, earlier: Histogram | None) -> Histogram:
        """The observations made between ``earlier`` and this scrape. Fewer observations now than
        then means the dispatcher's process was replaced in between: its new one counts from zero."""
        if earlier is None or earlier.count > self.count:
            return self
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
            self.count - earlier.count,
            self.total - earlier.total,
        )

    def plus(self, other: Histogram) -> Histogram:
        """Both histograms' observations together (the same metric, hence the same bounds)."""
        mine = dict(self.buckets)
        return Histogram(
            tuple((le, n + mine.get(le, 0.0)) for le, n in other.buckets),
            self.count + other.count,
            self.total + other.total,
        )


@dataclass(frozen=True)
class Scrape:
    """One read of the dispatcher's ``/metrics``: its histograms keyed "<loop>/<part>" (tick/total,
    reconcile/falcon, ...) and its process's garbage collections keyed "gc/<generation>", and the
    picks deferred so far (``falcon_picks_deferred``, summed over the queues), and the API calls
    made so far keyed "<api>/<call>" (``falcon_api_calls``, summed over outcomes). Empty and None
    when it does not (yet) export them."""

    histograms: dict[str, Histogram] = field(default_factory=dict)
    picks_deferred: float | None = None
    process_started: float | None = None  # the serving process's start time: which process answered
    api_calls: dict[str, float] = field(default_factory=dict)


@dataclass
class Window:
    """The observations between a window's first scrape and its last, summed over the scrapes in
    between. A dispatcher run replaced inside the window restarts its counts from zero; summed
    scrape by scrape, the window loses only what the old run counted after its last scrape, where
    the difference of the window's two ends would hold the new run's ticks alone."""

    last: Scrape
    histograms: dict[str, Histogram] = field(default_factory=dict)
    picks_deferred: float | None = None
    replaced: int = 0  # dispatcher processes replaced inside the window
    api_calls: dict[str, float] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)
    ended: float | None = None  # set by whoever closes the window

    def add(self, now: Scrape) -> None:
        """Count a later scrape. An empty one (nobody serving /metrics, as between two dispatcher
        runs) is skipped: the next scrape that answers counts what happened meanwhile. So is one
        of the same process with fewer ticks than the last: it was read before the last one."""
        if not now.histograms:
            return
        replaced = self._replaced_by(now)
        if replaced is None:
            return
        self.replaced += replaced
        for part, histogram in now.histograms.items():
            seen = histogram.since(None if replaced else self.last.histograms.get(part))
            self.histograms[part] = self.histograms[part].plus(seen) if part in self.histograms else seen
        if now.picks_deferred is not None:
            earlier = None if replaced else self.last.picks_deferred
            deferred = counted_since(now.picks_deferred, earlier)
            self.picks_deferred = (self.picks_deferred or 0.0) + deferred
        for call, total in now.api_calls.items():
            made = counted_since(total, None if replaced else self.last.api_calls.get(call))
            self.api_calls[call] = self.api_calls.get(call, 0.0) + made
        self.last = now

    def _replaced_by(self, now: Scrape) -> bool | None:
        """Whether ``now`` comes from a new process; None for a scrape older than the last one."""
        ticks, before = now.histograms.get("tick/total"), self.last.histograms.get("tick/total")
        fewer = ticks is not None and before is not None and ticks.count < before.count
        started, started_before = now.process_started, self.last.process_started
        if started is None or started_before is None:
            return fewer  # no process identity on the page: fewer ticks means a new process
        if started != started_before:
            return True
        return None if fewer else False


@dataclass(frozen=True)
class Quantile:
    value: float  # seconds, interpolated inside its bucket
    lower: float  # the bucket's bounds: the value is known only to lie between them
    upper: float


@dataclass
class _Series:
    buckets: list[tuple[float, float]] = field(default_factory=list)
    count: float = 0.0
    total: float = 0.0


def histograms(
    text: str, metric: str, label: str, where: Mapping[str, str] | None = None
) -> dict[str, Histogram]:
    """Each series of the histogram ``metric`` in a Prometheus text page, keyed by ``label``'s
    value; with ``where``, only the series with those other labels."""
    series: dict[str, _Series] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric or family.type != "histogram":
            continue
        for sample in family.samples:
            key = sample.labels.get(label)
            if key is None or any(sample.labels.get(k) != v for k, v in (where or {}).items()):
                continue
            one = series.setdefault(key, _Series())
            if sample.name.endswith("_bucket"):
                one.buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                one.count = sample.value
            elif sample.name.endswith("_sum"):
                one.total = sample.value
    return {key: Histogram(tuple(sorted(one.buckets)), one.count, one.total) for key, one in series.items()}


def counter_total(text: str, metric: str) -> float:
    """The sum over every labelled series of the counter ``metric`` (its name without ``_total``) in a
    Prometheus text page. A labelled counter none of whose series was incremented yet exports no
    sample, hence 0 when the page has none."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == metric and family.type == "counter"
        for sample in family.samples
        if sample.name == f"{metric}_total"
    )


def counters_by(text: str, metric: str, labels: tuple[str, ...]) -> dict[str, float]:
    """The counter ``metric`` summed per value of ``labels`` (joined by "/") over its other labels."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric or family.type != "counter":
            continue
        for sample in family.samples:
            if sample.name == f"{metric}_total":
                key = "/".join(sample.labels.get(label, "") for label in labels)
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def gauge_value(text: str, metric: str) -> float | None:
    """The value of an unlabelled gauge in a Prometheus text page; None when the page has none."""
    for family in text_string_to_metric_families(text):
        if family.name == metric and family.samples:
            return family.samples[0].value
    return None


def counted_since(later: float, earlier: float | None) -> float:
    """A counter's increase between two scrapes; less now than then means the process was replaced in
    between and its new one counts from zero (as ``Histogram.since``)."""
    return later if earlier is None or earlier > later else later - earlier


def quantile(histogram: Histogram, q: float) -> Quantile | None:
    """The q-quantile (0 < q < 1), None without observations. One in the +Inf bucket is reported as
    the highest finite bound (its true value is only known to be above it)."""
    if histogram.count <= 0:
        return None
    rank = q * histogram.count
    lower, below = 0.0, 0.0
    for le, cumulative in histogram.buckets:
        if cumulative >= rank:
            if math.isinf(le):
                return Quantile(lower, lower, le)
            inside = cumulative - below
            fraction = (rank - below) / inside if inside > 0 else 1.0
            return Quantile(lower + (le - lower) * fraction, lower, le)
        lower, below = le, cumulative
    return Quantile(lower, lower, math.inf)


@dataclass(frozen=True)
class Usage:
    """The memory of a set of processes at one moment, in bytes (``pss`` None where the kernel does
    not report it), and the CPU time they have used so far (a process that exited takes its own out)."""

    pss: int | None
    rss: int
    cpu_seconds: float
    processes: int


def tree(root: int) -> list[psutil.Process]:
    """A process and all its descendants (those started in sessions of their own included)."""
    try:
        parent = psutil.Process(root)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def usage(processes: Iterable[psutil.Process]) -> Usage:
    """PSS, RSS and CPU time summed over ``processes``; one that exited meanwhile is left out."""
    pss: int | None = 0
    rss = count = 0
    cpu = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            info = process.memory_full_info()
            times = process.cpu_times()
            rss += info.rss
            pss = pss + info.pss if pss is not None and hasattr(info, "pss") else None
            cpu += times.user + times.system
            count += 1
    return Usage(pss, rss, cpu, count)


def find_process(*fragments: str) -> psutil.Process | None:
    """The oldest process whose command line contains every fragment (a server we started but
    whose handle a context manager keeps to itself)."""
    found = [
        p
        for p in psutil.process_iter(["cmdline", "create_time"])
        if all(any(f in arg for arg in p.info["cmdline"] or ()) for f in fragments)
    ]
    return min(found, key=lambda p: p.info["create_time"]) if found else None

"""How long until a task's pods run: an ETA to Running from its queue's observed acquisitions.

A queue (cluster, topology) lets one task acquire at a time, from its pick to all pods Running
(README, *Nomenclature*). A task waiting at position k therefore reaches Running after the rest
of the current acquisition, the k - 1 acquisitions ahead of it, and its own:

    T = R(e) + D_1 + ... + D_k

where e is how long the current acquisition has run so far, R(e) its remaining time, and the D
are acquisition durations (pick to Running) of this queue. A task that acquires itself has k = 0.

Method (why this one):

* **The D are resampled from the queue's own last ``HISTORY`` acquisitions**, not fitted to a
  distribution. A queue mixes reused pools (about a minute), reservation creations and
  flex-start waits (long, heavy-tailed): a mixture no one parametric family fits from a dozen
  points, whereas the empirical distribution keeps its modes and tail. R(e) is drawn from the
  observed durations longer than e, minus e (the empirical conditional remaining time): a
  flex-start creation that has already taken 20 min is not expected to finish in the median's 8.
* **Deterministic.** The resampling uses fixed uniforms (a seeded generator, one column per
  draw), so the same history always gives the same answer; and sample s of position k + 1 is
  sample s of position k plus one more draw (common random numbers), so every sample, and with
  it every quantile, grows with the position.
* **The interval is the 80 % interval of the resampled totals, widened for the history's own
  error.** Resampling alone treats the observed mean as the true one; its standard error
  sigma/sqrt(n) is shared by all k draws, so it adds k * z * sigma/sqrt(n) to the spread, which
  matters most when history is short and the queue long. Each side's half-width is combined
  with it in quadrature (as a prediction interval's sqrt(1 + 1/n) does for one draw).
  Repeating the same observations therefore keeps the resampled part exactly (the empirical
  quantile function is the same) and shrinks the widening: more history of the same kind
  narrows the interval or keeps it.
* **Honest when thin**: with fewer than ``MIN_OBSERVATIONS`` acquisitions there is no estimate.
  When the current acquisition has already run longer than any observed one, the remaining
  time cannot be drawn from history: it counts as none, and the estimate says so.

The point estimate is the median of the totals (it minimises the expected absolute error).
Everything here is pure: durations in seconds in, numbers out; no clock, no I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from statistics import pstdev

# The last acquisitions of a queue an estimate resamples: few, because a queue changes pace (its
# own finished pools are handed over, flex-start gives way to the reservation); in
# benchmarks/bench_eta.py 5 to 10 beat 20 on error and coverage.
HISTORY = 10
MIN_OBSERVATIONS = 3  # fewer is no estimate
LEVEL = 0.8  # the interval's nominal coverage
SAMPLES = 400  # resampled totals per estimate: a quantile's sampling error well under the interval
SEED = "falcon-eta"
_Z = 1.2815515655446004  # the standard normal's 90th percentile: an 80 % two-sided interval
_LONGEST = 365 * 86400.0  # an acquisition longer than a year is a broken timestamp


@dataclass(frozen=True)
class Estimate:
    """Seconds from now to Running: the point estimate and its ``level`` interval."""

    seconds: float
    low: float
    high: float
    observations: int  # acquisitions of the queue it was computed from
    beyond_history: bool = False  # the current acquisition already outlasted every observed one
    level: float = LEVEL


@dataclass(frozen=True)
class NoEstimate:
    """Too little history to say anything honest."""

    observations: int
    needed: int = MIN_OBSERVATIONS


def acquisition_seconds(spans: Iterable[tuple[datetime | None, datetime | None]]) -> tuple[float, ...]:
    """Durations pick to Running of ``(acquiring_at, running_at)`` pairs, in the order given.

    Pairs with a missing end, and durations that are negative, not finite or over a year (a
    clock step, a row written by hand), are dropped rather than allowed to skew the estimate."""
    durations = []
    for start, end in spans:
        if start is None or end is None:
            continue
        seconds = (end - start).total_seconds()
        if math.isfinite(seconds) and 0 <= seconds <= _LONGEST:
            durations.append(seconds)
    return tuple(durations)


def estimate_to_running(
    history: Sequence[float], acquisitions: int, current_elapsed: float | None
) -> Estimate | NoEstimate:
    """The time to Running of a task with ``acquisitions`` whole acquisitions still to come, its
    own included (its position when waiting; 0 when it acquires), behind a current acquisition
    that has run ``current_elapsed`` seconds (None: the queue's slot is free).

    ``history``: the queue's acquisition durations in seconds, oldest first; the last
    ``HISTORY`` usable ones are used."""
    if acquisitions < 0:
        raise ValueError(f"acquisitions must be at least 0, got {acquisitions}")
    durations = _usable(history)[-HISTORY:]
    if len(durations) < MIN_OBSERVATIONS:
        return NoEstimate(len(durations))
    ordered = sorted(durations)
    remaining = _remaining(ordered, current_elapsed)
    point, low, high = _bounds(ordered, remaining, acquisitions)
    return Estimate(
        point, low, high, len(ordered), beyond_history=current_elapsed is not None and not remaining
    )


def _usable(history: Sequence[float]) -> list[float]:
    return [d for d in history if math.isfinite(d) and 0 <= d <= _LONGEST]


def _remaining(ordered: Sequence[float], elapsed: float | None) -> list[float]:
    """The current acquisition's possible remaining times: observed durations beyond ``elapsed``,
    minus it, ascending. Empty when the slot is free or nothing observed lasted that long."""
    if elapsed is None:
        return []
    return [d - elapsed for d in ordered if d > elapsed]


def _bounds(
    ordered: Sequence[float], remaining: Sequence[float], acquisitions: int
) -> tuple[float, float, float]:
    """Median and widened 80 % bounds of the resampled totals, made monotone over 0..k draws
    (a task further back can never reach Running sooner than the one ahead of it)."""
    totals = [_draw(remaining, u) if remaining else 0.0 for u in _column(0)]
    spread = _Z * pstdev(ordered) / math.sqrt(len(ordered))
    best = _widened(totals, 0.0)
    for draw in range(1, acquisitions + 1):
        totals = [t + _draw(ordered, u) for t, u in zip(totals, _column(draw), strict=True)]
        point, low, high = _widened(totals, draw * spread)
        best = (max(best[0], point), max(best[1], low), max(best[2], high))
    return best


def _widened(totals: Sequence[float], shared_error: float) -> tuple[float, float, float]:
    """Median and 80 % bounds of ``totals``, each side widened in quadrature by the error all
    the draws share (the history's mean being off); never below zero."""
    ranked = sorted(totals)
    point, low, high = (_quantile(ranked, p) for p in (0.5, (1 - LEVEL) / 2, (1 + LEVEL) / 2))
    return (
        point,
        max(0.0, point - math.hypot(point - low, shared_error)),
        point + math.hypot(high - point, shared_error),
    )


def _quantile(ranked: Sequence[float], p: float) -> float:
    return ranked[round(p * (len(ranked) - 1))]


def _draw(ordered: Sequence[float], u: float) -> float:
    """The empirical quantile function: each observation is drawn with probability 1/n. Repeating
    the observations leaves it unchanged (floor(floor(2un)/2) = floor(un))."""
    return ordered[min(len(ordered) - 1, math.floor(u * len(ordered)))]


@lru_cache(maxsize=512)
def _column(draw: int) -> tuple[float, ...]:
    """The fixed uniforms of one draw across all samples: the same for every call."""
    rng = random.Random(f"{SEED}:{draw}")
    return tuple(rng.random() for _ in range(SAMPLES))

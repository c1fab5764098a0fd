"""Issue 10's goals, judged from the economics benchmark's seed tables (bench_pool_economics.py).

Apart from the benchmark so that its verdicts can be tested without importing the benchmark, which
sets Prefect's environment for its own process."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Goal:
    name: str
    met: bool
    detail: str


def goals(runs: list[dict[str, dict[str, float]]]) -> list[Goal]:
    """The issue's goals, from the seeds' tables of one shape (each needs the falcon arm, and the
    rows it compares with)."""
    found: list[Goal] = []

    def have(*rows: str) -> list[dict[str, dict[str, float]]]:
        return [run for run in runs if all(r in run for r in rows)]

    if seeds := have("falcon", "delete-each", "keep-all"):
        pairs = [
            (run["falcon"]["total_h"], min(run["delete-each"]["total_h"], run["keep-all"]["total_h"]))
            for run in seeds
        ]
        found.append(
            Goal(
                "Falcon's node-hours <= the better baseline's on every seed",
                all(f <= b for f, b in pairs),
                ", ".join(f"{f:.1f} vs {b:.1f}" for f, b in pairs),
            )
        )

    if seeds := have("falcon", "optimum"):
        found.append(
            within_15_percent_of_the_optimum(
                seeds, "falcon", "Falcon's node-hours within 15 % of the optimum on average"
            )
        )
        avoided = sum(run["falcon"]["tasks"] - run["falcon"]["created"] for run in seeds)
        name = ">= 90 % of the creations the optimum avoids are avoided by Falcon"
        found.append(most_of_the_optimums_creations(seeds, avoided, name))
    if seeds := have("horizon@c&d", "optimum"):
        avoided = sum(run["horizon@c&d"]["reused"] for run in seeds)
        name = (
            "(the model) a horizon rule within create-and-delete's node-hours avoids >= 90 % of"
            " the creations the optimum avoids"
        )
        found.append(most_of_the_optimums_creations(seeds, avoided, name))
    if seeds := have("opt@start", "optimum"):
        name = "(the model) a plan keeping the start goal within 15 % of the optimum, on average"
        found.append(within_15_percent_of_the_optimum(seeds, "opt@start", name))
    if seeds := have("falcon", "keep-all"):
        for key, label in (("to_running_mean_min", "mean"), ("to_running_p90_min", "p90")):
            falcon = statistics.fmean(run["falcon"][key] for run in seeds)
            keep_all = statistics.fmean(run["keep-all"][key] for run in seeds)
            found.append(
                Goal(
                    f"Falcon's {label} submit->Running within +10 % of keep-all's",
                    falcon <= 1.1 * keep_all,
                    f"{falcon:.1f} vs {keep_all:.1f} min ({falcon / keep_all - 1:+.0%}), mean over the seeds",
                )
            )
    return found


def within_15_percent_of_the_optimum(seeds: list[dict[str, dict[str, float]]], row: str, name: str) -> Goal:
    """``row``'s node-hours against the optimum's, the mean excess over the seeds."""
    excess = [run[row]["total_h"] / run["optimum"]["total_h"] - 1 for run in seeds]
    mean = statistics.fmean(excess)
    return Goal(name, mean <= 0.15, f"mean {mean:+.1%} (" + ", ".join(f"{e:+.1%}" for e in excess) + ")")


def most_of_the_optimums_creations(
    seeds: list[dict[str, dict[str, float]]], avoided: float, name: str
) -> Goal:
    """``avoided`` creations over the seeds against the 90 % of the optimum's that the issue asks."""
    best = sum(run["optimum"]["reused"] for run in seeds)
    share = f" ({avoided / best:.1%})" if best else " (the optimum avoids none)"
    return Goal(name, avoided >= 0.9 * best, f"{avoided:.0f} of {best:.0f} over the seeds{share}")

"""``falcon tidal pool``: warm node-pool rules for Falcon's own queues.

A rule keeps ``--pools`` idle node pools of one (cluster, topology) queue ready from each fire of
its cron expression on, until another rule of the queue fires; the dispatcher creates them
(reservation first, flex-start otherwise) and trims the surplus. Each command imports what it
uses, inside its function, as ``falcon.cli``'s do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from falcon.cli_db import database, registered_cluster

if TYPE_CHECKING:
    from falcon.domain.warm_pools import WarmRule, WarmTarget

pool_app = typer.Typer(
    no_args_is_help=True, help="Tidal warm pools: idle node pools kept ready by cron rules."
)


@pool_app.command("add")
def pool_add(
    cluster: Annotated[str, typer.Option(help="the cluster's name (or id) in the registry")],
    topology: Annotated[str, typer.Option(help="the queue's topology, e.g. 2x4")],
    cron: Annotated[str, typer.Option(help="'CRON_TZ=<zone> sec min hour dom month dow' or a descriptor")],
    pools: Annotated[int, typer.Option(help="idle node pools to keep ready from each fire on")],
    name: Annotated[str, typer.Option(help="the rule's name: lowercase letters, digits, '-'")],
    tpu_type: Annotated[str | None, typer.Option("--tpu-type", help="checked against the cluster's")] = None,
) -> None:
    """Add a warm rule to a (cluster, topology) queue; an invalid cron is refused naming its field."""
    from falcon.adapters.clock import utc_now
    from falcon.adapters.db import repository as repo
    from falcon.domain.cron import parse_cron
    from falcon.domain.errors import InvalidSpecError
    from falcon.domain.model import QueueKey
    from falcon.domain.topology import canonical_tpu_type, normalise_topology, resolve_shape
    from falcon.domain.warm_pools import WarmRule, check_pools, check_rule_name

    checks: list[tuple[str, Callable[[], object]]] = [
        ("--name", lambda: check_rule_name(name)),
        ("--pools", lambda: check_pools(pools)),
        ("--cron", lambda: parse_cron(cron)),
    ]
    for option, check in checks:
        try:
            check()
        except ValueError as exc:  # a CronError names the field: "hour: 25 is above the maximum 23 (in '…')"
            raise typer.BadParameter(str(exc), param_hint=option) from exc
    with database() as session:
        found = registered_cluster(repo.list_clusters(session), cluster)
        if tpu_type is not None and canonical_tpu_type(tpu_type) != canonical_tpu_type(found.tpu_type):
            raise typer.BadParameter(f"cluster {found.name} offers {found.tpu_type}", param_hint="--tpu-type")
        try:
            shape = resolve_shape(found.tpu_type, normalise_topology(topology))
        except InvalidSpecError as exc:
            raise typer.BadParameter(str(exc), param_hint="--topology") from exc
        rule = WarmRule(name, QueueKey(found.id, shape.topology), cron, pools, utc_now())
        if not repo.add_warm_rule(session, rule):
            typer.echo(f"falcon: a warm rule named {name} exists already (remove it first)", err=True)
            raise typer.Exit(code=1)
    typer.echo(f"added {name}: {pools} pool(s) of {found.tpu_type} {shape.topology} on {found.name}, {cron}")


@pool_app.command("list")
def pool_list() -> None:
    """Every warm rule with its queue, next fire, and whether it gives its queue's target now."""
    from falcon.adapters.clock import utc_now
    from falcon.adapters.db import repository as repo
    from falcon.domain.cron import parse_cron
    from falcon.domain.warm_pools import schedulable, warm_targets

    with database() as session:
        rules, clusters = repo.warm_rules(session), {c.id: c.name for c in repo.list_clusters(session)}
    now = utc_now()
    usable = schedulable(rules)
    targets = warm_targets(usable, now)
    for rule in rules:
        queue = f"{clusters.get(rule.queue.cluster_id, rule.queue.cluster_id):<16} {rule.queue.topology:<8}"
        if rule in usable:
            upcoming = parse_cron(rule.cron).next_after(now)
            when = f"next={upcoming.isoformat()}{_active(targets[rule.queue], rule)}"
        else:
            when = "invalid cron, ignored"
        typer.echo(f"{rule.name:<20} {queue} pools={rule.pools:<3} {rule.cron}  {when}{_last_error(rule)}")


def _last_error(rule: WarmRule) -> str:
    if rule.failed_at is None:
        return ""
    return f"  last error {rule.failed_at:%Y-%m-%d %H:%M:%S} UTC: {rule.last_error}"


def _active(target: WarmTarget, rule: WarmRule) -> str:
    """Whether the rule gives its queue's target now, since which fire, over which tied rules."""
    if target.rule != rule.name or target.fired_at is None:
        return ""
    tied = f" over {', '.join(target.tied)} (same instant, fewer pools)" if target.tied else ""
    return f"  active since {target.fired_at.isoformat()}{tied}"


@pool_app.command("remove")
def pool_remove(name: str) -> None:
    """Remove a warm rule; its queue's surplus idle pools go once no other rule keeps them."""
    from falcon.adapters.db import repository as repo

    with database() as session:
        removed = repo.remove_warm_rule(session, name)
    if not removed:
        typer.echo(f"falcon: no warm rule {name}", err=True)
        raise typer.Exit(code=1)
    typer.echo(f"removed {name}")

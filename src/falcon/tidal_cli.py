"""``falcon tidal``: cron rules for workload replicas (TidalScheduler) and for warm node pools."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from falcon.cli_db import registered_cluster
from falcon.warm_pool_cli import pool_app

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from falcon.adapters.tidal_k8s import TidalKubernetes
    from falcon.bootstrap import Gateways
    from falcon.domain.model import Cluster

# As in falcon.cli, each command imports what it uses inside its function.

tidal_app = typer.Typer(no_args_is_help=True, help=__doc__)
tidal_app.add_typer(pool_app, name="pool")

FIRES_SHOWN = 3  # per rule, by `falcon tidal status`


@tidal_app.command("next")
def next_fires(
    expression: Annotated[str, typer.Argument(help="e.g. 'CRON_TZ=Asia/Shanghai 0 0 9 * * 1-5'")],
    after: Annotated[
        str | None,
        typer.Option(help="ISO 8601 instant; without an offset, in the rule's zone (default: now)"),
    ] = None,
    count: Annotated[int, typer.Option(min=1, max=10_000)] = 1,
) -> None:
    """Print the next fire times of a cron rule, one per line, with the zone's offset."""
    from falcon.domain.cron import CronError, parse_cron

    try:
        schedule = parse_cron(expression)
    except CronError as error:
        typer.echo(f"falcon tidal next: {error}", err=True)
        raise typer.Exit(code=2) from error
    for fire in schedule.upcoming(_instant(after, schedule.zone), count):
        typer.echo(fire.isoformat())


def _instant(text: str | None, zone: ZoneInfo) -> datetime:
    if text is None:
        return datetime.now(zone)
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 instant", param_hint="--after") from exc
    return instant if instant.tzinfo else instant.replace(tzinfo=zone)


@tidal_app.command("apply")
def apply(
    filename: Annotated[Path, typer.Option("-f", "--filename", exists=True, dir_okay=False, readable=True)],
    cluster: Annotated[str, typer.Option(help="a registered cluster's name (or id)")],
) -> None:
    """Create or update the TidalScheduler(s) of a YAML file on a cluster; the file may also hold
    the TidalScheduler CRD (infra/tidal-scheduler/crd.yaml), which is installed first."""
    import yaml

    api = _tidal_api(_clusters(cluster)[0])
    documents = [doc for doc in yaml.safe_load_all(filename.read_text()) if doc]
    refused = sum(not _apply_one(api, doc) for doc in sorted(documents, key=_definitions_first))
    if refused:
        raise typer.Exit(code=1)


def _definitions_first(document: Any) -> bool:
    return not _is_definition(document)


def _is_definition(document: Any) -> bool:
    from falcon.domain.tidal import CRD_NAME

    return isinstance(document, dict) and (
        document.get("kind") == "CustomResourceDefinition"
        and document.get("metadata", {}).get("name") == CRD_NAME
    )


def _apply_one(api: TidalKubernetes, document: Any) -> bool:
    """Apply one document and say so; False (and why, on stderr) when it was not applied."""
    from falcon.domain.errors import FalconError
    from falcon.domain.tidal import API_VERSION, CRD_NAME, KIND

    if _is_definition(document):
        kind, where, action = "customresourcedefinition", CRD_NAME, api.install_definition
    elif isinstance(document, dict) and (document.get("apiVersion"), document.get("kind")) == (
        API_VERSION,
        KIND,
    ):
        metadata = document.setdefault("metadata", {})
        metadata.setdefault("namespace", "default")
        kind, where, action = "tidalscheduler", f"{metadata['namespace']}/{metadata.get('name')}", api.apply
    else:
        typer.echo(f"falcon tidal apply: skipped a document that is not a {API_VERSION} {KIND}", err=True)
        return False
    try:
        typer.echo(f"{kind} {where} {action(document)}")
    except FalconError as error:
        typer.echo(f"falcon tidal apply: {where} refused: {error}", err=True)
        return False
    return True


@tidal_app.command("list")
def list_objects(
    cluster: Annotated[str | None, typer.Option(help="only this cluster (default: every active one)")] = None,
) -> None:
    """The TidalSchedulers of the registered clusters, one per line."""
    from falcon.domain.errors import FalconError
    from falcon.domain.tidal import READY, TidalScheduler

    rows = [("CLUSTER", "NAMESPACE", "NAME", "DESIRED", "ACTIVE RULE", "NEXT TRIGGER", "READY")]
    failed = False
    for found in _clusters(cluster):
        try:
            objects, _ = _tidal_api(found).list()
        except FalconError as error:
            typer.echo(f"falcon tidal list: cluster {found.name}: {error}", err=True)
            failed = True
            continue
        for obj in sorted(map(TidalScheduler.from_dict, objects), key=lambda o: o.key):
            status, ready = obj.status, obj.status.condition(READY)
            rows.append(
                (
                    found.name,
                    obj.namespace,
                    obj.name,
                    _text(status.desired_replicas),
                    _text(status.active_rule),
                    _text(status.next_trigger_time),
                    "-" if ready is None else ready.status if ready.status == "True" else ready.reason,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if failed:
        raise typer.Exit(code=1)


@tidal_app.command("status")
def status(
    name: str,
    cluster: Annotated[
        str | None, typer.Option(help="the cluster (default: search every active one)")
    ] = None,
    namespace: Annotated[str, typer.Option()] = "default",
) -> None:
    """One TidalScheduler's status, and the next fires of each of its rules."""
    import yaml

    from falcon.domain.errors import NotFoundError
    from falcon.domain.tidal import TidalScheduler

    found: list[tuple[Cluster, Mapping[str, Any]]] = []
    for candidate in _clusters(cluster):
        try:
            found.append((candidate, _tidal_api(candidate).get(namespace, name)))
        except NotFoundError:
            continue
    if len(found) != 1:
        problem = (
            f"is on clusters {', '.join(c.name for c, _ in found)}: choose one with --cluster"
            if found
            else "was not found"
        )
        typer.echo(f"falcon tidal status: TidalScheduler {namespace}/{name} {problem}", err=True)
        raise typer.Exit(code=1)
    (on, raw), obj = found[0], TidalScheduler.from_dict(found[0][1])
    typer.echo(f"TidalScheduler {obj.key} on cluster {on.name}")
    typer.echo(f"target: {obj.target or '-'}")
    typer.echo(yaml.safe_dump({"status": dict(raw.get("status") or {})}, sort_keys=False).rstrip())
    typer.echo("rules:")
    for rule in obj.rules:
        typer.echo(f"  {rule.name}: {rule.replicas} replicas at {rule.cron!r}")
        typer.echo(f"    next: {_next_fires(rule.cron)}")


def _next_fires(expression: str) -> str:
    from falcon.domain.cron import CronError, parse_cron

    try:
        schedule = parse_cron(expression)
    except CronError as error:
        return f"never: {error}"
    return ", ".join(fire.isoformat() for fire in schedule.upcoming(datetime.now(schedule.zone), FIRES_SHOWN))


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _clusters(name: str | None) -> list[Cluster]:
    """The registered cluster called ``name`` (id, or a name no two projects share), or every active
    one; exits 1 if there is no active one."""
    from falcon.adapters.db.migrate import SchemaState, schema_state
    from falcon.adapters.db.store import SqlTaskStore
    from falcon.domain.model import ClusterStatus
    from falcon.settings import get_settings

    url = get_settings().resolved_database_url
    registered = [] if schema_state(url) is SchemaState.NEW else SqlTaskStore(url).clusters()
    if name is not None:
        return [registered_cluster(registered, name)]
    active = [c for c in registered if c.status is ClusterStatus.ACTIVE]
    if not active:
        typer.echo("falcon tidal: no active registered cluster; see `falcon cluster add`", err=True)
        raise typer.Exit(code=1)
    return active


def _tidal_api(cluster: Cluster) -> TidalKubernetes:
    return _gateways().tidal(cluster)


@cache
def _gateways() -> Gateways:
    """One set of clients for the command, whatever number of clusters it reaches."""
    from falcon.bootstrap import Gateways
    from falcon.settings import get_settings

    return Gateways(get_settings())

"""The ``falcon`` command: database, clusters registry, tasks, emulator and the local stack."""

from __future__ import annotations

import gc
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from falcon.adapters.clock import utc_now
from falcon.cli_db import database, database_url
from falcon.domain.model import Cluster, ClusterStatus, QueueKey, is_zone, queue_label, region_of
from falcon.tidal_cli import tidal_app

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from falcon.domain.explain import ReservationRoom, WhyFacts

# Each command imports what it uses, inside its function: `falcon --help` loads neither the
# settings nor the database layer, the database commands load no Prefect and no cloud client
# (tests/unit/test_cli_imports.py holds both). ClusterStatus is imported here because Typer
# reads the option types of every command whichever one runs.


class _Falcon(typer.Typer):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The process entry point (the console script, ``python -m falcon.cli``; CliRunner does not
        come here). When the command is done, the few hundred thousand objects its imports made
        (SQLAlchemy, pydantic, Typer) are frozen out of the garbage collector, so that the
        interpreter's last collection does not walk them all on the way out (~0.1 s of a
        `falcon task list`). Only unreachable cycles left at exit go unfinalized, which Python
        never promised to finalize anyway; ``_db`` disposes its engine itself."""
        global _in_process
        _in_process = True
        try:
            return super().__call__(*args, **kwargs)
        finally:
            gc.freeze()


_in_process = False


def _short_lived() -> None:
    """The first line of a command that imports, answers and exits. Such a command is mostly
    imports, which build long-lived objects and next to no garbage: the cyclic collector, walking
    the growing pile again and again, costs ~15% of them (~60 ms of the database layer's), so it
    is off until the process ends. Only in the process: a test's CliRunner keeps its collector."""
    if _in_process:
        gc.disable()


app = _Falcon(no_args_is_help=True, help=__doc__)
db_app = typer.Typer(no_args_is_help=True, help="Database schema.")
cluster_app = typer.Typer(no_args_is_help=True, help="The clusters registry.")
task_app = typer.Typer(no_args_is_help=True, help="Tasks (rows of the job table).")
emulator_app = typer.Typer(no_args_is_help=True, help="The local GKE/Compute/Kubernetes emulator.")
app.add_typer(db_app, name="db")
app.add_typer(cluster_app, name="cluster")
app.add_typer(task_app, name="task")
app.add_typer(emulator_app, name="emulator")
app.add_typer(tidal_app, name="tidal")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database named by FALCON_DATABASE_URL to the latest schema."""
    _short_lived()
    from falcon.adapters.db.migrate import upgrade

    upgrade(database_url())
    typer.echo("database is up to date")


@cluster_app.command("add")
def cluster_add(
    name: str,
    project: Annotated[str, typer.Option()],
    location: Annotated[str, typer.Option()],
    tpu_type: Annotated[str, typer.Option("--tpu-type")],
    gcs_bucket: Annotated[str, typer.Option("--gcs-bucket")],
    reservation: Annotated[
        str | None, typer.Option(help="NAME, or projects/OWNER/reservations/NAME if shared")
    ] = None,
    zone: Annotated[
        str | None,
        typer.Option(
            "--zone",
            "--reservation-zone",
            help="zone of the node pools and the reservation; required when --location is a region",
        ),
    ] = None,
    namespace: Annotated[str, typer.Option()] = "falcon-jobs",
    status: Annotated[ClusterStatus, typer.Option()] = ClusterStatus.ACTIVE,
    check: Annotated[
        bool, typer.Option("--check/--no-check", help="run `falcon cluster check` on it afterwards")
    ] = True,
) -> None:
    """Register an edge cluster (idempotent on project/location/name), then check it: the
    registration stands whatever the check finds (exit 0); `falcon cluster check` is the gate."""
    _short_lived()
    from falcon.adapters.db import repository as repo
    from falcon.domain.node_pools import ReservationRef

    zone = _node_zone(location, zone)
    if reservation is not None:
        try:
            ReservationRef.parse(reservation, project)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--reservation") from exc
    with database() as session:
        found = repo.find_cluster(session, name, project, location)
        if found is not None:
            typer.echo(f"cluster {project}/{location}/{name} is already registered")
            if check:
                _check_after_add(found)
            return
        cluster = Cluster(
            str(uuid.uuid4()),
            name,
            project,
            location,
            tpu_type,
            gcs_bucket,
            reservation,
            status,
            namespace,
            zone,
        )
        repo.add_cluster(session, cluster, utc_now())
    from falcon.adapters.audit import cluster_registered

    cluster_registered(cluster)
    typer.echo(f"registered {cluster.id} {project}/{location}/{name}")
    if check:
        _check_after_add(cluster)


def _check_after_add(cluster: Cluster) -> None:
    """The check's lines; a failure is said on stderr but does not fail `add`: the row is written
    (and the dispatcher may pick it), and a script that must stop gates on `falcon cluster check`."""
    if _run_check(cluster):
        typer.echo(
            f"falcon cluster add: {cluster.name} is registered but failed its check; fix the above, then "
            f"run `falcon cluster check {cluster.name} --project={cluster.project} "
            f"--location={cluster.location}`",
            err=True,
        )


@cluster_app.command("check")
def cluster_check(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the registered cluster's name (or id)")],
    project: Annotated[str | None, typer.Option(help="when two projects have a cluster NAME")] = None,
    location: Annotated[str | None, typer.Option(help="when two locations have a cluster NAME")] = None,
) -> None:
    """Prove a registration before the first task: GKE reachable, Falcon's IAM permissions, the
    reservation, the TPU type in the zone, the Job namespace and service account, the bucket
    binding, the TidalScheduler CRD. One line per check, with the fix of each failure; exit 1 on any."""
    _short_lived()
    from falcon.adapters.db.migrate import SchemaState, schema_state
    from falcon.adapters.db.store import SqlTaskStore
    from falcon.cli_db import registered_cluster
    from falcon.settings import get_settings

    url = get_settings().resolved_database_url
    registered = [] if schema_state(url) is SchemaState.NEW else SqlTaskStore(url).clusters()
    wanted = [
        c
        for c in registered
        if (project is None or c.project == project) and (location is None or c.location == location)
    ]
    try:
        cluster = registered_cluster(wanted, name)
    except typer.BadParameter as exc:
        raise typer.BadParameter(
            exc.message.replace("give the id", "add --project/--location or give the id"), param_hint="NAME"
        ) from exc
    raise typer.Exit(code=_run_check(cluster))


def _run_check(cluster: Cluster) -> int:
    """Print each check's verdict (and fix); 1 when one failed."""
    from falcon.bootstrap import Gateways
    from falcon.settings import get_settings

    zone = cluster.zone or cluster.location
    typer.echo(f"checking {cluster.name} ({cluster.project}/{cluster.location}, zone {zone})")
    try:
        from falcon.adapters.cluster_probe import ClusterProbe
        from falcon.domain.cluster_check import evaluate, failed

        probe = ClusterProbe(Gateways(get_settings()))
    except Exception as exc:  # no credentials at all: nothing else can be asked
        typer.echo(f"FAIL credentials: {_first_line(exc)}")
        typer.echo("     fix: gcloud auth application-default login, or set FALCON_GCP_CREDENTIALS_BLOCK")
        return 1
    setup = probe.setup()
    results = evaluate(cluster, probe.facts(cluster, setup.job_service_account), setup)
    for result in results:
        typer.echo(result.line)
    return 1 if failed(results) else 0


def _node_zone(location: str, zone: str | None) -> str:
    """A TPU slice lives in one zone: a regional cluster must name it, a zonal one defaults to itself."""
    if zone is None:
        if not is_zone(location):
            problem = f"{location} is a region: name the node zone, e.g. {location}-b"
            raise typer.BadParameter(problem, param_hint="--zone")
        return location
    if not is_zone(zone) or region_of(zone) != region_of(location):
        raise typer.BadParameter(f"{zone} is not a zone of {region_of(location)}", param_hint="--zone")
    return zone


@cluster_app.command("list")
def cluster_list() -> None:
    _short_lived()
    from falcon.adapters.db import repository as repo

    with database() as session:
        for c in repo.list_clusters(session):
            typer.echo(
                f"{c.id}  {c.project}/{c.location}/{c.name}  {c.tpu_type}  {c.status.value}  "
                f"zone={c.zone or c.location}  reservation={c.default_reservation or '-'}  "
                f"bucket={c.gcs_bucket}"
            )


@task_app.command("submit")
def task_submit(
    command: Annotated[list[str], typer.Argument(help="the command, after --")],
    actor: Annotated[str, typer.Option()],
    name: Annotated[str, typer.Option()],
    tpu_type: Annotated[str, typer.Option("--tpu-type")],
    topology: Annotated[str, typer.Option()],
    image: Annotated[str, typer.Option()],
    timeout: Annotated[int | None, typer.Option()] = None,
    env: Annotated[list[str] | None, typer.Option(help="K=V, repeatable")] = None,
    task_id: Annotated[str | None, typer.Option("--id")] = None,
) -> None:
    """Insert a Pending row, as the upstream component does."""
    _short_lived()
    from falcon.adapters.db import repository as repo

    pairs = dict(item.split("=", 1) for item in env or [])
    spec = {"image": image, "command": command, "args": [], "env": pairs, "topology": topology}
    new_id = task_id or f"task-{uuid.uuid4().hex[:12]}"
    with database() as session:
        repo.insert_task(
            session,
            task_id=new_id,
            actor=actor,
            name=name,
            tpu_type=tpu_type,
            spec=spec,
            timeout_seconds=timeout,
            now=utc_now(),
        )
    typer.echo(new_id)


@task_app.command("list")
def task_list(limit: int = 50) -> None:
    _short_lived()
    from falcon.adapters.db import repository as repo

    with database() as session:
        tasks = repo.list_tasks(session, limit)
    for t in tasks:
        reason = t.reason or ""
        typer.echo(
            f"{t.id:<24} {t.actor:<10} {t.name:<20} {t.status.value:<9} {reason:<20} {t.message or ''}"
        )


@task_app.command("show")
def task_show(task_id: str) -> None:
    _short_lived()
    from falcon.adapters.db import repository as repo

    with database() as session:
        task = repo.get_task(session, task_id)
        progress = repo.get_progress(session, task_id)
    if task is None:
        raise typer.Exit(code=_missing(task_id))
    fields = {k: (str(v) if v is not None else None) for k, v in task.__dict__.items()}
    fields["spec"] = task.spec
    fields["phase"] = progress.phase if progress else None
    typer.echo(json.dumps(fields, ensure_ascii=False, indent=2))


@task_app.command("why")
def task_why(
    task_id: str,
    compute: Annotated[
        bool, typer.Option("--compute", help="ask Compute for the reservation's free nodes")
    ] = False,
) -> None:
    """Why the task is where it is: its place in its queue, what the queue waits for, the
    reservation, and an ETA to Running from the queue's observed acquisitions."""
    _short_lived()
    from falcon.domain.explain import explain

    with database() as session:
        found = _why_facts(session, task_id)
    if found is None:
        raise typer.Exit(code=_missing(task_id))
    facts, cluster = found
    if compute and cluster is not None and facts.reservation is not None:
        facts = replace(facts, reservation=_compute_room(cluster, facts.reservation))
    for line in explain(facts, utc_now()):
        typer.echo(line)


def _why_facts(session: Session, task_id: str) -> tuple[WhyFacts, Cluster | None] | None:
    """What `why` says about the task, read in one unit of work, with its cluster; None for an
    unknown id."""
    from falcon.adapters.db import repository as repo
    from falcon.domain.eta import HISTORY, acquisition_seconds
    from falcon.domain.explain import WhyFacts
    from falcon.domain.status import Reason, Status

    task, cluster, progress = repo.task_view_rows(session, task_id)
    if task is None:
        return None
    queue = progress.queue if progress else None
    acquiring_at, running_at = repo.acquisition_times(session, task_id)
    facts = WhyFacts(
        task=task,
        phase=progress.phase if progress else None,
        queue=_queue_name(cluster, queue),
        cluster=cluster.name if cluster else None,
        acquiring_at=acquiring_at,
        running_at=running_at,
        outcome=progress.outcome if progress else None,
    )
    if queue is None or task.status is not Status.PENDING:
        return facts, cluster
    return replace(
        facts,
        order=tuple(repo.waiting_order(session, queue)) if task.reason is Reason.WAITING else (),
        acquirer=repo.queue_acquirer(session, queue),
        reservation=_reservation_room(session, cluster, queue.topology) if cluster else None,
        history=acquisition_seconds(repo.acquisition_history(session, queue, HISTORY)),
    ), cluster


def _queue_name(cluster: Cluster | None, queue: QueueKey | None) -> str | None:
    """The queue's label (as run tags and slots show it), or its cluster id and topology when
    the cluster is no longer registered."""
    if queue is None:
        return None
    return queue_label(cluster, queue.topology) if cluster else f"{queue.cluster_id}:{queue.topology}"


def _reservation_room(session: Session, cluster: Cluster, topology: str) -> ReservationRoom | None:
    """What Falcon's own records say of the cluster's reservation: its pools on it, their nodes.

    A pool records the reservation as GKE's affinity names it: NAME for the cluster's own
    project's, however the cluster was registered."""
    from falcon.adapters.db import repository as repo
    from falcon.domain.explain import ReservationRoom
    from falcon.domain.node_pools import ReservationRef

    if cluster.default_reservation is None:
        return None
    try:
        affinity = ReservationRef.parse(cluster.default_reservation, cluster.project).affinity_value
    except ValueError:  # malformed: no pool was ever created on it
        affinity = cluster.default_reservation
    held = repo.pools_on_reservation(session, cluster.id, affinity)
    return ReservationRoom(
        name=cluster.default_reservation,
        pools=len(held),
        nodes=sum(_nodes(cluster.tpu_type, t) for t in held),
        needed=_nodes(cluster.tpu_type, topology),
    )


def _nodes(tpu_type: str, topology: str) -> int:
    """A pool's node count; 0 for a shape Falcon cannot resolve (it would never have created it)."""
    from falcon.domain.topology import resolve_shape

    try:
        return resolve_shape(tpu_type, topology).nodes
    except ValueError:
        return 0


def _compute_room(cluster: Cluster, room: ReservationRoom) -> ReservationRoom:
    """The reservation's free nodes as Compute reports them, through the adapter the dispatcher
    uses; whatever keeps Compute from answering (unreachable, no credentials, a refusal) is said
    in the answer, not raised."""
    from falcon.bootstrap import Gateways
    from falcon.domain.node_pools import ReservationRef
    from falcon.settings import get_settings

    try:
        ref = ReservationRef.parse(room.name, cluster.project)
        capacity = Gateways(get_settings()).reservations.capacity(ref, cluster.node_zone)
    except Exception as exc:
        return replace(room, problem=_first_line(exc))
    return replace(room, capacity=capacity)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


@task_app.command("abort")
def task_abort(task_id: str) -> None:
    """Request an abort, as upstream does: status Aborting with aborting_at."""
    _short_lived()
    from falcon.adapters.db import repository as repo

    now = utc_now()
    with database() as session:
        moved = repo.request_abort(session, task_id, now)
    typer.echo("abort requested" if moved else f"task {task_id} is not active")


def _missing(task_id: str) -> int:
    typer.echo(f"no task {task_id}", err=True)
    return 1


@emulator_app.command("serve")
def emulator_serve(
    port: int = 8765,
    config: Annotated[Path | None, typer.Option()] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir")] = None,
    host: str = "127.0.0.1",
) -> None:
    """Serve the emulated GKE, Compute and Kubernetes APIs until Ctrl-C."""
    from falcon.settings import get_settings
    from falcon_emulator.server import serve

    serve(port, config, data_dir or get_settings().home / "emulator", host)


@app.command("local")
def local(
    emulator: Annotated[bool, typer.Option("--emulator")] = False,
    emulator_config: Annotated[Path | None, typer.Option("--emulator-config")] = None,
    emulator_port: int = 8765,
) -> None:
    """The whole stack in the foreground: Prefect server (if PREFECT_API_URL is unset), the
    emulator when asked, and the deployments served. Ctrl-C or SIGTERM stops everything."""
    from falcon.local import run_local

    raise typer.Exit(code=run_local(emulator, emulator_config, emulator_port))


@app.command("serve-deployments", hidden=True)
def serve_deployments() -> None:
    """The runner child of `falcon local` (needs PREFECT_API_URL set before Prefect is imported)."""
    from falcon.local import serve_deployments as serve

    serve()


@app.command("demo")
def demo(
    keep_running: Annotated[bool, typer.Option("--keep-running")] = False,
    tasks: int = 6,
) -> None:
    """Run the stack on the embedded defaults, submit sample tasks, show them reach Succeeded."""
    from falcon.local import run_demo

    raise typer.Exit(code=run_demo(keep_running, tasks))


if __name__ == "__main__":
    app()

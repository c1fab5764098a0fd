"""Hostile job rows, fuzzed from the raw row to the rendered Job (issue 8, "Hostile input").

We test: (1) each kind of bad row ends Failed/InvalidSpec with a Message that names the column or
spec field at fault, shows hostile text escaped and stays short; (2) every row intake accepts
renders a Job and a Service the Kubernetes API server would accept (names, label values, env names,
quantities, text); (3) no spec reaches beyond the contract: one container, Falcon's GCS volume and
service account, no host namespace, privilege or host path, the shape's TPU chips and nothing
else; (4) a batch mixing bad and good rows fails each bad one alone and queues the good ones in
the same pass. Kubernetes' rules are written here from its API validation, not from Falcon's code.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.fakes import cluster, one_cluster, spec_for

from falcon.domain.errors import InvalidSpecError
from falcon.domain.job_manifest import GCSFUSE_DRIVER, JobTarget, render_job, render_service
from falcon.domain.model import FALCON_ENV, MAX_SPEC_BYTES, TaskSpec, k8s_job_name_for, node_pool_name_for
from falcon.domain.status import Reason, Status
from falcon.domain.topology import GENERATIONS, SliceShape, canonical_tpu_type
from falcon.services.context import Services
from falcon.services.intake import MAX_TIMEOUT_SECONDS, take_in, validate

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLUSTER = cluster("c1")
SERVICE_ACCOUNT = "falcon-runner"
GOOD = spec_for("2x4")
# NUL, lone surrogates, bidi override and isolate, RLM, blanks, env expansion, path parts, CJK
ODD = [
    "\0",
    "\ud800",
    "\udfff",
    "\u202e",
    "\u2066",
    "\u200f",
    "\n",
    "\t",
    " ",
    "$(POD_NAME)",
    "/",
    "..",
    "任",
]
odd_text = st.lists(st.characters() | st.sampled_from(ODD), max_size=20).map("".join)

# -- what the API server accepts (k8s.io/apimachinery validation, core and batch validation) --------

DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
QUALIFIED_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
# Pods may not request negative amounts: no '-' sign.
QUANTITY = re.compile(
    r"\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
POWERS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "": 1}
POWERS |= {s: Decimal(10) ** e for s, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)}
MAX_OBJECT_BYTES = 1_572_864  # etcd's request limit, 1.5 MiB


def amount(quantity: str) -> Decimal:
    match = QUANTITY.fullmatch(quantity)
    assert match, quantity
    suffix = match["suffix"] or ""
    scale = Decimal(10) ** int(suffix[1:]) if suffix[:1] in ("e", "E") else Decimal(POWERS[suffix])
    return Decimal(match["number"]) * scale


def assert_valid_metadata(metadata: dict[str, Any], name_rule: re.Pattern[str] | None) -> None:
    if name_rule is not None:
        assert name_rule.fullmatch(metadata["name"]) and len(metadata["name"]) <= 63, metadata["name"]
    for key, value in metadata["labels"].items():
        assert QUALIFIED_NAME.fullmatch(key), key
        assert LABEL_VALUE.fullmatch(value) and len(value) <= 63, value
    for key, value in metadata.get("annotations", {}).items():
        assert QUALIFIED_NAME.fullmatch(key) and isinstance(value, str), key


def assert_utf8_without_nul(value: object) -> None:
    """JSON reaches the API server as UTF-8, and exec cannot pass NUL: every string must be clean."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert_utf8_without_nul(key)
            assert_utf8_without_nul(item)
    elif isinstance(value, list):
        for item in value:
            assert_utf8_without_nul(item)
    elif isinstance(value, str):
        value.encode("utf-8")
        assert "\0" not in value


def assert_api_server_accepts(job: dict[str, Any], service: dict[str, Any], shape: SliceShape) -> None:
    assert_valid_metadata(job["metadata"], DNS_1123_LABEL)
    assert_valid_metadata(job["spec"]["template"]["metadata"], None)
    assert_valid_metadata(service["metadata"], DNS_1035_LABEL)
    # Indexed pods are named <job>-<index>, a hostname; others get a 5-character suffix the API trims to fit.
    assert len(f"{job['metadata']['name']}-{shape.nodes - 1}") <= 63
    assert_utf8_without_nul(job)
    assert len(json.dumps(job).encode()) < MAX_OBJECT_BYTES
    pod = job["spec"]["template"]["spec"]
    for selector_value in pod["nodeSelector"].values():
        assert LABEL_VALUE.fullmatch(selector_value) and len(selector_value) <= 63
    (container,) = pod["containers"]
    assert container["image"] and container["image"] == container["image"].strip()
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)), names
    assert all(ENV_VAR_NAME.fullmatch(n) for n in names), names
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    for kind, limit in limits.items():
        assert amount(requests.get(kind, limit)) <= amount(limit), (kind, requests, limits)
    assert all(amount(q) >= 0 for q in requests.values())
    assert requests["google.com/tpu"] == limits["google.com/tpu"]  # extended resources: no overcommit


# -- the contract, and nothing more, reaches the Job ------------------------------------------------

POD_FIELDS = {
    "restartPolicy",
    "nodeSelector",
    "tolerations",
    "containers",
    "volumes",
    "subdomain",
    "serviceAccountName",
}
CONTAINER_FIELDS = {"name", "image", "command", "args", "env", "resources", "volumeMounts"}
FORBIDDEN_KEYS = {
    "securityContext", "privileged", "allowPrivilegeEscalation", "capabilities", "hostPath", "hostNetwork",
    "hostPID", "hostIPC", "hostUsers", "initContainers", "ephemeralContainers", "hostPort", "volumeDevices",
}  # fmt: skip


def all_keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(all_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(all_keys(v) for v in value))
    return set()


def assert_hardened(job: dict[str, Any], target: JobTarget) -> None:
    assert not all_keys(job) & FORBIDDEN_KEYS
    spec_fields = {"suspend", "backoffLimit", "parallelism", "completions", "completionMode", "template"}
    assert set(job["spec"]) <= spec_fields and job["spec"]["suspend"] is True
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == target.shape.nodes
    pod = job["spec"]["template"]["spec"]
    assert set(pod) <= POD_FIELDS
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["volumes"] == [
        {
            "name": "gcs-logs",
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "readOnly": False,
                "volumeAttributes": {"bucketName": CLUSTER.gcs_bucket, "mountOptions": "implicit-dirs"},
            },
        }
    ]
    (container,) = pod["containers"]
    assert set(container) <= CONTAINER_FIELDS and container["name"] == "main"
    assert container["volumeMounts"] == [{"name": "gcs-logs", "mountPath": "/gcs"}]
    chips = str(target.shape.chips_per_node)
    assert set(container["resources"]) == {"requests", "limits"}
    for kinds in container["resources"].values():
        assert kinds["google.com/tpu"] == chips
        assert set(kinds) <= {"google.com/tpu", "cpu", "memory", "ephemeral-storage"}


# -- rows: good ones, and one strategy per kind of bad one --------------------------------------


def insert(svc: Services, row: dict[str, Any], task_id: str = "t") -> str:
    """A row as upstream might write it (``spec`` anything JSON holds, NULL included); its id."""
    store: Any = svc.store
    task_id = row.get("id", task_id)
    columns = {k: v for k, v in row.items() if k in ("actor", "name", "tpu_type", "timeout_seconds")}
    store.insert_task(task_id, **columns)
    store.rows[task_id] = replace(store.rows[task_id], spec=row.get("spec", GOOD))
    return str(task_id)


def spec_with(**fields: Any) -> dict[str, Any]:
    return {**GOOD, **fields}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3),
    max_leaves=8,
)
not_a_text = json_values.filter(lambda v: not isinstance(v, str))
not_a_text_list = json_values.filter(
    lambda v: not (isinstance(v, list) and all(isinstance(i, str) for i in v))
)


def with_odd(draw: st.DrawFn, bad: str) -> str:
    """A text with one bad character somewhere in it."""
    text = draw(st.text(max_size=10))
    at = draw(st.integers(0, len(text)))
    return text[:at] + bad + text[at:]


@st.composite
def _container_text_with_nul_or_surrogate(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    field = draw(st.sampled_from(["command", "args", "env"]))
    text = with_odd(draw, draw(st.sampled_from(["\0", "\ud800", "\udfff"])))
    value: Any = {"MY_VAR": text} if field == "env" else ["python", text]
    return {"spec": spec_with(**{field: value})}, field


BAD_QUANTITIES = [
    -1,
    "-4",
    "1e999",
    "abc",
    True,
    None,
    [],
    "4 Gi",
    "0x10",
    "1.5.1",
    "",
    "Infinity",
    float("nan"),
    "1" * 40,
]


@st.composite
def _hostile_resources(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """Another resource kind (the TPU's own included), a bad quantity, a request above its limit,
    or a section Kubernetes has but Falcon does not take."""
    section, kind = "requests", "cpu"
    quantity: object = "1"
    match draw(st.sampled_from(["kind", "quantity", "above limit", "section"])):
        case "kind":
            other = st.sampled_from(["google.com/tpu", "nvidia.com/gpu", "hugepages-2Mi", "pods", "CPU"])
            kind = draw(other | odd_text.filter(lambda k: k not in ("cpu", "memory", "ephemeral-storage")))
        case "quantity":
            quantity = draw(st.sampled_from(BAD_QUANTITIES))
        case "above limit":
            return {
                "spec": spec_with(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})
            }, "resources"
        case _:
            section = draw(st.sampled_from(["claims", "requests ", "Limits"]))
    return {"spec": spec_with(resources={section: {kind: quantity}})}, "resources"


BAD_ROWS: dict[str, st.SearchStrategy[tuple[dict[str, Any], str]]] = {
    "spec is not an object": json_values.filter(lambda v: not isinstance(v, dict)).map(
        lambda v: ({"spec": v}, "spec")
    ),
    "a field is missing": st.sampled_from(["image", "command", "topology"]).map(
        lambda f: ({"spec": {k: v for k, v in GOOD.items() if k != f}}, f)
    ),
    "image of the wrong type": not_a_text.map(lambda v: ({"spec": spec_with(image=v)}, "image")),
    "command of the wrong type": (not_a_text_list | st.just([]) | st.just([""])).map(
        lambda v: ({"spec": spec_with(command=v)}, "command")
    ),
    "args of the wrong type": not_a_text_list.map(lambda v: ({"spec": spec_with(args=v)}, "args")),
    "env of the wrong type": (
        json_values.filter(
            lambda v: not isinstance(v, dict) or any(not isinstance(x, str) for x in v.values())
        )
    ).map(lambda v: ({"spec": spec_with(env=v)}, "env")),
    "env sets what Falcon sets": st.sampled_from(FALCON_ENV).map(
        lambda k: ({"spec": spec_with(env={k: "mine"})}, k)
    ),
    "env name is not a variable name": (
        odd_text.filter(lambda k: not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", k))
    ).map(lambda k: ({"spec": spec_with(env={k: "v"})}, "env")),
    "topology of the wrong type": not_a_text.map(lambda v: ({"spec": spec_with(topology=v)}, "topology")),
    "resources of the wrong type": (
        not_a_text.filter(lambda v: v is not None and not isinstance(v, dict))
    ).map(lambda v: ({"spec": spec_with(resources=v)}, "resources")),
    "resources beyond cpu, memory and storage": _hostile_resources(),
    "NUL or lone surrogate for the container": _container_text_with_nul_or_surrogate(),
    "image with blanks or controls": (
        st.sampled_from(["\0", "\ud800", "\u202e", " ", "\n", "\t"]).map(lambda c: f"trainer{c}:1")
    ).map(lambda v: ({"spec": spec_with(image=v)}, "image")),
    "a spec too large to start": st.integers(MAX_SPEC_BYTES, 2 * MAX_SPEC_BYTES).map(
        lambda n: ({"spec": spec_with(args=["x" * n])}, "spec")
    ),
    "a field outside the contract": (
        st.sampled_from(
            sorted(FORBIDDEN_KEYS | {"serviceAccountName", "volumes", "containers", "nodeSelector"})
        )
    ).map(lambda k: ({"spec": spec_with(**{k: True})}, k)),
    "timeout not positive or beyond 30 days": (
        st.integers(max_value=0) | st.integers(MAX_TIMEOUT_SECONDS + 1, 10**15)
    ).map(lambda t: ({"timeout_seconds": t}, "timeout_seconds")),
    "id that cannot name a log folder": (
        st.sampled_from(["/", "\0", "\n", "\u202e", "\ud800"]).map(lambda c: f"x{c}y")
    ).map(lambda i: ({"id": i}, "id")),
    "actor or name with controls": (
        st.tuples(
            st.sampled_from(["actor", "name"]), st.sampled_from(["\0", "\n", "\x1b", "\u202e", "\ud800"])
        )
    ).map(lambda fc: ({fc[0]: f"a{fc[1]}b"}, fc[0])),
    "actor or name longer than its column": st.sampled_from(["actor", "name"]).map(
        lambda f: ({f: "x" * 300}, f)
    ),
    "unknown tpu_type": odd_text.filter(lambda t: canonical_tpu_type(t) not in GENERATIONS).map(
        lambda t: ({"tpu_type": t}, "tpu_type")
    ),
}


# One row wrong in one way, and the column or spec field its Message must name.
bad_rows = st.sampled_from(sorted(BAD_ROWS)).flatmap(BAD_ROWS.__getitem__)


def assert_names(message: str, field: str) -> None:
    """The Message names the field, and hostile text in it is escaped and cut."""
    assert field in message, (field, message)
    assert len(message) <= 1000
    message.encode("utf-8")
    assert not any(unicodedata.category(c) in ("Cc", "Cs", "Cf") for c in message), ascii(message)


@PROPERTY
@given(
    st.lists(st.one_of(bad_rows.map(lambda r: (True, r)), st.just((False, ({}, "")))), min_size=1, max_size=8)
)
def test_a_batch_fails_each_bad_row_alone_naming_the_field_and_queues_the_good_ones(
    rows: list[tuple[bool, tuple[dict[str, Any], str]]],
) -> None:
    svc = one_cluster()  # a fresh world per example (the svc fixture would be shared by all of them)
    ids = [insert(svc, {**row, "id": f"t{i}{row.get('id', '')}"}) for i, (_, (row, _f)) in enumerate(rows)]
    report = take_in(
        svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events
    )

    for task_id, (bad, (_row, field)) in zip(ids, rows, strict=True):
        task = svc.store.task(task_id)
        assert task is not None
        if bad:
            assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC), task.message
            assert task.message is not None
            assert_names(task.message, field)
        else:
            assert (task.status, task.reason, task.cluster_id) == (Status.PENDING, Reason.WAITING, "c1")
    assert sorted(report.failed) == sorted(i for i, (bad, _) in zip(ids, rows, strict=True) if bad)
    assert sorted(t.task_id for _, t in report.queued) == sorted(
        i for i, (bad, _) in zip(ids, rows, strict=True) if not bad
    )


# -- accepted rows render a Job the API server takes, and only the contract reaches it -------------

VALID_TOPOLOGIES = {
    "v5e": ["1x1", "2x2", "2x4", "4x4"],
    "v6e": ["1x1", "2x4", "16x16"],
    "v5p": ["2x2x1", "2x2x2", "4x4x8"],
    "v7x": ["2x2x1", "2x4x4"],
}
quantities = (
    st.integers(0, 512).map(str)
    | st.sampled_from(["500m", "64Gi", "1.5", "2e3", "100M", "+1"])
    | st.integers(0, 64)
)


def now_and_then(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``rare`` one time in ten, so that most fuzzed rows are accepted and reach the renderer."""
    return st.sampled_from([common] * 9 + [rare]).flatmap(lambda strategy: strategy)


texts = now_and_then(st.text(max_size=20), odd_text)  # any Unicode but lone surrogates; NUL now and then
env_names = now_and_then(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,20}", fullmatch=True), st.sampled_from(FALCON_ENV)
)
resource_kinds = now_and_then(
    st.sampled_from(["cpu", "memory", "ephemeral-storage"]), st.just("google.com/tpu")
)
images = now_and_then(st.sampled_from(["trainer:1", "us-docker.pkg.dev/p/r/t@sha256:" + "a" * 64]), odd_text)
ids = st.text(
    st.characters(exclude_categories=("Cc", "Cs")) | st.sampled_from("$/.-"), min_size=1, max_size=64
)


@st.composite
def fuzzed_rows(draw: st.DrawFn) -> dict[str, Any]:
    """Rows mostly within the contract, with any text wherever text may go, and now and then a
    field that tries to reach beyond it."""
    tpu_type = draw(st.sampled_from(sorted(VALID_TOPOLOGIES)))
    topology = draw(st.sampled_from(VALID_TOPOLOGIES[tpu_type]))
    spelt = draw(st.sampled_from([topology, topology.upper(), f" {topology} ", topology.replace("x", " × ")]))
    spec: dict[str, Any] = {
        "image": draw(images),
        "command": [
            draw(now_and_then(st.text(min_size=1, max_size=20), odd_text)),
            *draw(st.lists(texts, max_size=2)),
        ],
        "args": draw(st.lists(texts, max_size=3)),
        "env": draw(st.dictionaries(env_names, texts, max_size=4)),
        "topology": spelt,
    }
    if draw(st.booleans()):
        spec["resources"] = {
            "requests": draw(st.dictionaries(resource_kinds, quantities, max_size=2)),
            "limits": draw(st.dictionaries(resource_kinds, quantities, max_size=2)),
        }
    beyond = draw(now_and_then(st.none(), st.sampled_from(sorted(FORBIDDEN_KEYS))))
    if beyond is not None:
        spec[beyond] = True
    return {
        "id": draw(ids),
        "tpu_type": tpu_type,
        "spec": spec,
        "timeout_seconds": draw(now_and_then(st.none() | st.integers(1, MAX_TIMEOUT_SECONDS), st.integers())),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzzed_rows())
def test_every_accepted_row_renders_a_job_the_api_server_accepts_and_nothing_beyond_the_contract(
    row: dict[str, Any],
) -> None:
    svc = one_cluster(tpu_type=row["tpu_type"])
    task = svc.store.task(insert(svc, row))
    assert task is not None
    try:
        shape = validate(task)
    except InvalidSpecError:
        return  # refused rows are the batch test's business
    target = JobTarget(
        task.id, k8s_job_name_for(task.id), node_pool_name_for(task.id, shape.topology), CLUSTER, shape,
        service_account=SERVICE_ACCOUNT,
    )  # fmt: skip
    job = render_job(TaskSpec.parse(task.spec), target)
    assert_api_server_accepts(job, render_service(target), shape)
    assert_hardened(job, target)


# -- topologies of every shape ----------------------------------------------------------------------

topologies = st.one_of(
    odd_text,
    st.from_regex(r"\s*[0-9]{1,3}\s*[xX×]\s*[0-9]{1,3}(\s*[xX×]\s*[0-9]{1,3})?\s*", fullmatch=True),
    st.sampled_from(
        ["02x04", "4x2", "0x4", "-2x4", "2x4x", "２x４", "1" * 5000 + "x1", "2x2x1", "x", "2xx4"]
    ),
)


@PROPERTY
@given(st.sampled_from(["v5e", "v6e", "v5p", "v7x"]), topologies)
def test_any_topology_is_queued_under_its_one_spelling_or_refused_naming_topology(
    tpu_type: str, topology: str
) -> None:
    svc = one_cluster(tpu_type=tpu_type)
    insert(svc, {"spec": spec_with(topology=topology), "tpu_type": tpu_type})
    take_in(svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events)
    task = svc.store.task("t")
    assert task is not None and task.message is not None
    if task.status is Status.FAILED:
        assert task.reason is Reason.INVALID_SPEC
        assert_names(task.message, "topology")
        return
    queue = svc.store.progress["t"].queue  # type: ignore[attr-defined]
    assert queue is not None
    dims = queue.topology.split("x")
    assert all(d.isdigit() and not d.startswith("0") for d in dims), queue.topology


# -- named cases of what a user may expect ------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param(
            {"spec": spec_with(env={"POD_NAME": "mine"})},
            "env: Value error, POD_NAME is set by Falcon in every pod and cannot be overridden",
            id="env collides with what Falcon sets",
        ),
        pytest.param(
            {"spec": spec_with(resources={"limits": {"google.com/tpu": 8}})},
            "google.com/tpu is requested by Falcon from the topology",
            id="resources override the TPU chips",
        ),
        pytest.param({"timeout_seconds": -1}, "timeout_seconds must be positive", id="negative timeout"),
        pytest.param(
            {"timeout_seconds": MAX_TIMEOUT_SECONDS + 1},
            f"timeout_seconds must be positive and at most {MAX_TIMEOUT_SECONDS} (30 days)",
            id="timeout beyond 30 days",
        ),
        pytest.param({"id": ".."}, "id '..' cannot name the task's log folder", id="id '..'"),
        pytest.param(
            {"spec": spec_with(topology="1" * 5000 + "x1")},
            "topology: String should have at most 32 characters",
            id="topology too long to be a shape",
        ),
        pytest.param(
            {"spec": spec_with(**{"x" * 100: 1})},
            "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…",
            id="long unknown field",
        ),
    ],
)
def test_what_a_user_is_told(svc: Services, row: dict[str, Any], expected: str) -> None:
    task_id = insert(svc, row)
    take_in(svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events)
    task = svc.store.task(task_id)
    assert task is not None and task.message is not None
    assert (task.status, task.reason) == (Status.FAILED, Reason.INVALID_SPEC)
    assert expected in task.message


def test_timeout_of_thirty_days_and_a_dollar_in_the_id_are_accepted(svc: Services) -> None:
    insert(svc, {"id": "run$1", "timeout_seconds": MAX_TIMEOUT_SECONDS})
    report = take_in(
        svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events
    )
    assert [t.task_id for _, t in report.queued] == ["run$1"]


def test_one_shape_spelt_two_ways_is_one_queue(svc: Services) -> None:
    """A queue is one slot: "02X04" and "2x4" must not acquire side by side."""
    insert(svc, {"spec": spec_with(topology="02X04")}, "a")
    insert(svc, {"spec": spec_with(topology="2x4")}, "b")
    report = take_in(
        svc.store, svc.store.snapshot(500, with_book=False), svc.say, svc.clock.now(), svc.events
    )
    assert {q.topology for q, _ in report.queued} == {"2x4"}

"""The custom IAM role covers exactly the Google and Kubernetes API calls Falcon's code makes.

The calls are read from the code, not listed by hand: every module under ``src/falcon`` is parsed
and every reference to a method of an official client (``container_v1``/``compute_v1`` clients,
``kubernetes.client`` ``*Api`` classes) is collected, whether it is called at once or passed on
(``watch.stream(self._objects.list_cluster_custom_object, ...)``, a method picked by a
conditional). A client is recognised by its constructor (``self._core = k8s.CoreV1Api(api)``), by
a parameter's annotation (``client: container_v1.ClusterManagerClient``) or by the return annotation
of the function that made it (``credentials.gke_client``). Each call must be in
``falcon.adapters.iam.PERMISSIONS`` (IAM), in ``RBAC`` below (granted per cluster by
infra/tidal-scheduler) or in ``OPERATOR`` (run with a person's own credentials); the role file
must list exactly the union of the IAM permissions.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from tests.unit.test_tidal_manifests import grants, role_and_binding

from falcon.adapters.gke import to_node_pool
from falcon.adapters.iam import PERMISSIONS, REQUIRED_PERMISSIONS, REST_PERMISSIONS, calls_needing
from falcon.domain.model import ProvisioningMode
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.topology import resolve_shape

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "src" / "falcon"
ROLE_FILE = ROOT / "infra" / "iam" / "falcon-controller-role.yaml"
CLIENT_MODULES = {"google.cloud.container_v1", "google.cloud.compute_v1", "kubernetes.client"}

Call = tuple[str, str]  # (client class, method)

# TidalScheduler calls: granted on each cluster by the RBAC installed with the CRD, not by the
# project-wide role (which would then reach every custom resource and Deployment in the project).
# (file, API group, resource, verbs); a watch is a list call with watch=True, hence both verbs.
RBAC: dict[Call, tuple[str, str, str, tuple[str, ...]]] = {
    ("CustomObjectsApi", "list_cluster_custom_object"): (
        "rbac.yaml",
        "scheduling.tidal.io",
        "tidalschedulers",
        ("list", "watch"),
    ),
    ("CustomObjectsApi", "get_namespaced_custom_object"): (
        "rbac.yaml",
        "scheduling.tidal.io",
        "tidalschedulers",
        ("get",),
    ),
    ("CustomObjectsApi", "create_namespaced_custom_object"): (
        "rbac.yaml",
        "scheduling.tidal.io",
        "tidalschedulers",
        ("create",),
    ),
    ("CustomObjectsApi", "replace_namespaced_custom_object"): (
        "rbac.yaml",
        "scheduling.tidal.io",
        "tidalschedulers",
        ("update",),
    ),
    ("CustomObjectsApi", "patch_namespaced_custom_object_status"): (
        "rbac.yaml",
        "scheduling.tidal.io",
        "tidalschedulers/status",
        ("patch",),
    ),
    ("AppsV1Api", "read_namespaced_deployment"): ("rbac.yaml", "apps", "deployments", ("get",)),
    ("AppsV1Api", "read_namespaced_stateful_set"): ("rbac.yaml", "apps", "statefulsets", ("get",)),
    ("AppsV1Api", "read_namespaced_deployment_scale"): ("rbac.yaml", "apps", "deployments/scale", ("get",)),
    ("AppsV1Api", "read_namespaced_stateful_set_scale"): (
        "rbac.yaml",
        "apps",
        "statefulsets/scale",
        ("get",),
    ),
    ("AppsV1Api", "patch_namespaced_deployment_scale"): (
        "rbac-scale.yaml",
        "apps",
        "deployments/scale",
        ("patch",),
    ),
    ("AppsV1Api", "patch_namespaced_stateful_set_scale"): (
        "rbac-scale.yaml",
        "apps",
        "statefulsets/scale",
        ("patch",),
    ),
}
# `falcon tidal apply` of the CRD: a cluster-wide change a cluster admin makes (kubectl apply in
# infra/README.md), never granted to Falcon's account. Reading the CRD is granted (in PERMISSIONS):
# `falcon cluster check` asks whether it is installed.
OPERATOR: set[Call] = {
    ("ApiextensionsV1Api", "create_custom_resource_definition"),
    ("ApiextensionsV1Api", "replace_custom_resource_definition"),
}


# -- reading the calls from the code ----------------------------------------------------------------------
def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted module path, from every import in the module (TYPE_CHECKING and
    function-level imports included)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return names


def _client_class(expr: ast.expr | None, imports: dict[str, str]) -> str | None:
    """The client class an annotation (quoted or not) or constructor names (``k8s.CoreV1Api``)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        expr = ast.parse(expr.value, mode="eval").body
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    dotted = ".".join([imports.get(expr.id, expr.id), *parts])
    module, _, name = dotted.rpartition(".")
    is_api = name.endswith("Api") or (name.endswith("Client") and name != "ApiClient")
    return name if module in CLIENT_MODULES and is_api else None


def _constructed(
    value: ast.expr, imports: dict[str, str], names: dict[str, str], factories: dict[str, str]
) -> str | None:
    """The client class a value holds: a constructor's, a factory's (``gke_client(...)``), a name's."""
    if isinstance(value, ast.Call):
        func = value.func
        return _client_class(func, imports) or (
            factories.get(func.id) if isinstance(func, ast.Name) else None
        )
    if isinstance(value, ast.Name):
        return names.get(value.id)
    return None


def factories(source: str) -> dict[str, str]:
    """Module-level functions that return a client, by the return annotation (credentials.py)."""
    tree = ast.parse(source)
    imports = _imports(tree)
    return {
        node.name: client
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and (client := _client_class(node.returns, imports))
    }


def scan(source: str, made_by: dict[str, str] | None = None) -> dict[Call, list[int]]:
    """Every client method the source refers to, with the lines where it does; ``made_by`` names
    the functions that return clients (``factories``)."""
    made_by = made_by or {}
    tree = ast.parse(source)
    imports = _imports(tree)
    found: dict[Call, list[int]] = defaultdict(list)
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]
    for scope in scopes:
        attributes: dict[str, str] = {}  # self.<attr> -> client class, for the whole class
        # a class's own methods, or the module's own functions (each class is its own scope)
        functions = [n for n in scope.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        local: dict[ast.FunctionDef | ast.AsyncFunctionDef, dict[str, str]] = {}
        for function in functions:
            args = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
            names = {a.arg: c for a in args if (c := _client_class(a.annotation, imports))}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign | ast.AnnAssign):
                    value = node.value
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    client = _constructed(value, imports, names, made_by) if value else None
                    if isinstance(node, ast.AnnAssign):
                        client = client or _client_class(node.annotation, imports)
                    for target in targets:
                        if client and isinstance(target, ast.Name):
                            names[target.id] = client
                        elif (
                            client
                            and isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            attributes[target.attr] = client
            local[function] = names
        for function, names in local.items():
            for node in ast.walk(function):
                if not isinstance(node, ast.Attribute):
                    continue
                holder = node.value
                client = None
                if isinstance(holder, ast.Name | ast.Call):  # a name, or gke_client(...).get_cluster
                    client = _constructed(holder, imports, names, made_by)
                elif isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name):
                    client = attributes.get(holder.attr) if holder.value.id == "self" else None
                if client:
                    found[(client, node.attr)].append(node.lineno)
    return found


def code_calls() -> dict[Call, list[str]]:
    """Every client method Falcon's code refers to, with where ("path:line")."""
    paths = sorted(SOURCES.rglob("*.py"))
    made_by = {name: client for path in paths for name, client in factories(path.read_text()).items()}
    calls: dict[Call, list[str]] = defaultdict(list)
    for path in paths:
        for call, lines in scan(path.read_text(), made_by).items():
            calls[call] += sorted({f"{path.relative_to(ROOT)}:{line}" for line in lines})
    return calls


def rest_calls() -> dict[str, list[str]]:
    """The REST calls the code makes: the literal method id of every ``_google_rest(...)`` call."""
    calls: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SOURCES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name == "_google_rest":
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{path}:{node.lineno}: a REST call must name its API method id as a literal"
                )
                calls[first.value].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return calls


def test_rest_calls_and_their_grants_match() -> None:
    """Calls with no generated client (AuthorizedSession) are listed in REST_PERMISSIONS by method id."""
    made = rest_calls()
    assert set(made) == set(REST_PERMISSIONS), f"REST calls {dict(made)} vs table {sorted(REST_PERMISSIONS)}"


# -- the scanner itself can fail ---------------------------------------------------------------------------
def test_scan_finds_the_calls_we_know_of() -> None:
    known = {
        ("ClusterManagerClient", "create_node_pool"),  # parameter annotated with the client
        ("ReservationsClient", "get"),
        ("ResourcePoliciesClient", "insert"),
        ("BatchV1Api", "create_namespaced_job"),  # attribute built from the constructor
        ("CoreV1Api", "list_namespaced_pod"),
        ("CustomObjectsApi", "list_cluster_custom_object"),  # passed to watch.stream, not called
        ("AppsV1Api", "patch_namespaced_stateful_set_scale"),  # picked by a conditional
    }
    assert known <= set(code_calls())


def test_scan_sees_a_new_call_on_any_client_in_any_scope() -> None:
    source = """
from google.cloud import container_v1
from kubernetes import client as k8s
from kubernetes.client import CoreV1Api

class Jobs:
    def __init__(self, api: k8s.ApiClient, gke: container_v1.ClusterManagerClient) -> None:
        self._core = k8s.CoreV1Api(api)
        self._gke = gke
        self._config = k8s.Configuration()

    def go(self, flag: bool) -> None:
        self._core.delete_namespace("x")
        pick = self._gke.set_labels if flag else self._gke.get_server_config
        self._config.host = "h"

def helper(api: k8s.ApiClient) -> None:
    nodes = CoreV1Api(api)
    nodes.list_node()
    k8s.BatchV1Api(api).list_job_for_all_namespaces()
    made = gke_client(settings, credentials)
    made.list_clusters()

class Reservations:  # two classes, one attribute name, two clients
    def __init__(self, client: compute_v1.ReservationsClient) -> None:
        self._client = client

    def read(self) -> None:
        self._client.get()

class Policies:
    def __init__(self, client: "compute_v1.ResourcePoliciesClient") -> None:
        self._client = client

    def make(self) -> None:
        self._client.insert()
"""
    made_by = {"gke_client": "ClusterManagerClient"}
    assert set(scan("from google.cloud import compute_v1" + source, made_by)) == {
        ("CoreV1Api", "delete_namespace"),
        ("ClusterManagerClient", "set_labels"),
        ("ClusterManagerClient", "get_server_config"),
        ("CoreV1Api", "list_node"),
        ("BatchV1Api", "list_job_for_all_namespaces"),
        ("ClusterManagerClient", "list_clusters"),
        ("ReservationsClient", "get"),
        ("ResourcePoliciesClient", "insert"),
    }


def test_the_client_factories_are_known() -> None:
    found = {n: c for p in SOURCES.rglob("*.py") for n, c in factories(p.read_text()).items()}
    assert (
        found["gke_client"] == "ClusterManagerClient" and found["reservations_client"] == "ReservationsClient"
    )


# -- the calls, the table, the role ------------------------------------------------------------------------
def test_every_call_has_its_grant() -> None:
    calls = code_calls()
    unmapped = {call: where for call, where in calls.items() if call not in {*PERMISSIONS, *RBAC, *OPERATOR}}
    assert not unmapped, (
        "calls with no IAM permission in falcon.adapters.iam.PERMISSIONS (nor RBAC): "
        + "; ".join(
            f"{client}.{method} at {', '.join(where)}" for (client, method), where in sorted(unmapped.items())
        )
    )


def test_every_grant_is_for_a_call_the_code_makes() -> None:
    """A permission no call needs is a privilege too many."""
    stale = {*PERMISSIONS, *RBAC, *OPERATOR} - set(code_calls())
    assert not stale, f"granted for calls the code no longer makes: {sorted(stale)}"


def test_a_call_has_one_kind_of_grant() -> None:
    assert not (set(PERMISSIONS) & set(RBAC)) and not ({*PERMISSIONS, *RBAC} & OPERATOR)


def role() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(ROLE_FILE.read_text())
    return loaded


def test_role_lists_exactly_the_required_permissions() -> None:
    listed = role()["includedPermissions"]
    assert isinstance(listed, list)
    assert len(listed) == len(set(listed)), "a permission is listed twice"
    missing, extra = set(REQUIRED_PERMISSIONS) - set(listed), set(listed) - set(REQUIRED_PERMISSIONS)
    assert not missing and not extra, f"role file: missing {sorted(missing)}, extra {sorted(extra)}"
    assert listed == sorted(listed)


def test_role_file_is_what_gcloud_iam_roles_create_takes() -> None:
    """gcloud refuses unknown keys, a title over 100 or a description over 256 characters."""
    document = role()
    assert set(document) == {"title", "description", "stage", "includedPermissions"}
    title, description = str(document["title"]), str(document["description"])
    assert document["stage"] == "GA" and 0 < len(title) <= 100 and 0 < len(description) <= 256
    assert "iam.serviceAccounts.actAs" in description


def test_permission_names_have_the_service_resource_verb_shape() -> None:
    shape = re.compile(r"(container|compute|storage)\.[a-z][A-Za-z]+\.[a-z][A-Za-z]+")
    assert all(shape.fullmatch(p) for p in REQUIRED_PERMISSIONS)
    # GKE has no node-pool permissions: its node-pool methods check the cluster's.
    assert not any(p.startswith("container.nodePools.") for p in REQUIRED_PERMISSIONS)


def test_a_missing_permission_names_the_calls_it_breaks() -> None:
    assert calls_needing("container.clusters.update") == [
        "ClusterManagerClient.create_node_pool",
        "ClusterManagerClient.delete_node_pool",
    ]
    assert calls_needing("container.pods.delete") == []


@pytest.mark.parametrize("call", sorted(RBAC))
def test_tidal_calls_are_granted_by_the_clusters_rbac(call: Call) -> None:
    file, group, resource, verbs = RBAC[call]
    granted = grants(role_and_binding(file)[0])
    for verb in verbs:
        assert any(g in (group, "*") and r in (resource, "*") and v in (verb, "*") for g, r, v in granted), (
            f"{call} needs {verb} {group}/{resource}, which infra/tidal-scheduler/{file} does not grant"
        )


@pytest.mark.parametrize(
    ("tpu", "topology", "mode"),
    [
        ("v6e", "4x4", ProvisioningMode.RESERVATION),
        ("tpu7x", "2x2x2", ProvisioningMode.FLEX_START),
    ],
)
def test_node_pools_name_no_service_account(tpu: str, topology: str, mode: ProvisioningMode) -> None:
    """Why the role has no iam.serviceAccounts.actAs: GKE asks for it only on a service account the
    request names. A pool that names one needs actAs on it granted (roles/iam.serviceAccountUser)."""
    reservation = "res" if mode is ProvisioningMode.RESERVATION else None
    pool = to_node_pool(
        NodePoolPlan("falcon-x", resolve_shape(tpu, topology), mode, reservation, "us-east5-a")
    )
    assert pool.config.service_account == ""

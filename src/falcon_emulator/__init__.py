"""Local emulator of the GKE, Compute and Kubernetes APIs that Falcon talks to, on one plain-HTTP port.

Falcon's production adapters use the official clients (``container_v1.ClusterManagerClient`` with
``transport="rest"``, ``compute_v1.ReservationsClient`` / ``ResourcePoliciesClient``, ``kubernetes.client``);
in local/test mode they are pointed at this emulator. Entry points: ``falcon_emulator.config.EmulatorConfig``,
``falcon_emulator.app.create_app`` and ``falcon_emulator.server.{EmulatorServer, serve}``.

What is modelled
----------------
* GKE ``/v1/projects/*/locations/*/...``: clusters get/list (``endpoint`` = ``<host:port>/k8s/<p>/<l>/<c>``,
  dummy base64 CA), node pools create/get/list/delete, operations get/list. Bodies are parsed with the real
  ``container_v1.NodePool`` proto (int or string enums, unknown fields ignored, missing = default); responses
  use string enums and the Google error envelope. Operations go RUNNING -> DONE after
  ``nodePoolProvisionSeconds``; 409 ALREADY_EXISTS on a duplicate pool, 400 FAILED_PRECONDITION while another
  operation runs on the same pool, 429 "hits the concurrent operations quota N" (as
  terraform-provider-google#15205 quotes GKE) past ``nodePoolOperationsPerCluster`` operations on the
  cluster (default 5: GKE's troubleshooting page on concurrent operations allows one operation per node
  pool; 1 is the stricter rule reference 1.5 shows, any other operation on the cluster refused with the
  400), 404 for unknown things.
* Node pools: PROVISIONING -> RUNNING / ERROR (with ``conditions``), STOPPING -> gone (nodes deleted, their
  pods end Failed). Reservation pools take ``inUseCount`` per node from their zone's reservation; deletion
  gives the capacity back. Flex-start pools complete with 0 nodes and get the whole slice at once
  ``flexStart.delaySeconds`` after a pending pod that fits them appears (TriggeredScaleUp event), or never
  when ``flexStart.available`` is false (NotTriggerScaleUp + FailedScheduling). Nodes carry the GKE labels
  (nodepool, tpu-accelerator, tpu-topology, flex-start, spot, reservation-name, zone, instance-type), the
  ``google.com/tpu=present:NoSchedule`` taint, ``google.com/tpu`` allocatable and a Ready condition.
* Compute ``/compute/v1/projects/*/zones/*/reservations[/*]`` (read in their own zone only) and the
  aggregated list, with int64 counts as strings, ``status`` (config, default READY) and ``shareSettings``
  (config ``shareWith`` -> SPECIFIC_PROJECTS + ``projectMap``, else LOCAL); ``inUseCount`` follows the
  reservation pools' nodes. ``/compute/v1/projects/*/regions/*/resourcePolicies[/*]`` get/list/insert/delete
  as ``compute_v1.ResourcePoliciesClient`` sends them, returning a regional Operation already DONE (also
  readable under ``regions/*/operations``); 409 ``alreadyExists`` on a duplicate, 404 ``notFound``, 400
  ``resourceInUseByAnotherResource`` when a node pool still names the policy.
* The node-pool create rules, written from Google's documentation (TPU table in ``tpu_catalog``; the
  emulator imports nothing from Falcon):

  +----------------+----------------------------------------------------------+------------------------------+
  | rule           | what the emulator does                                   | source                       |
  +================+==========================================================+==============================+
  | Node pool      | A pool without ``locations`` is put in every node zone   | REST NodePool.locations,     |
  | zones          | of the cluster (config ``zones``; a zonal cluster's only | Cluster.locations            |
  |                | zone is its location); each location must be one of      |                              |
  |                | them.                                                    |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Node counts    | ``initialNodeCount`` and autoscaling                     | REST NodePoolAutoscaling;    |
  |                | ``min/maxNodeCount`` count per zone (nodes = count x     | gcloud node-pools create     |
  |                | zones); ``totalMin/MaxNodeCount`` count for the pool and | --num-nodes                  |
  |                | exclude the per-zone fields.                             |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Machine type   | A catalogued TPU type (``tpu_catalog``) or a general-    | tpu/docs/regions-zones;      |
  |                | purpose type; a TPU type must be offered in every zone   | tpu/docs/v5e, v5p, v6e,      |
  |                | of the pool (config ``tpuZones`` replaces the documented | tpu7x                        |
  |                | zones).                                                  |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Multi-host     | ``placementPolicy {type: COMPACT, tpuTopology}`` with a  | kubernetes-engine how-       |
  | slice          | topology the machine type forms; exactly one zone;       | to/tpus; tpu/docs/v6e        |
  |                | ``initialNodeCount`` 0 or the slice's VMs; an            | topology table               |
  |                | autoscaling maximum equal to the VMs.                    |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Single-host    | No ``tpuTopology`` nor placement policy; its topology is | xpk PR #822; how-to/tpus     |
  | slice          | the machine type's own (chips per VM).                   | single-host steps            |
  +----------------+----------------------------------------------------------+------------------------------+
  | TPU7x          | Multi-host only through ``placementPolicy.policyName``:  | concepts/tpu-ironwood;       |
  |                | a HIGH_THROUGHPUT workload policy with                   | container_v1                 |
  |                | ``acceleratorTopology`` in the cluster's project and the | PlacementPolicy.policyName   |
  |                | pool's region (else 400); never with COMPACT or          |                              |
  |                | ``tpuTopology``; the topology is the policy's.           |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Reservations   | SPECIFIC_RESERVATION ``NAME`` (the cluster's project) or | compute/docs/instances/reser |
  |                | ``projects/OWNER/reservations/NAME`` (shared:            | vations-shared; how-         |
  |                | SPECIFIC_PROJECTS with the cluster's project in          | to/consuming-reservations    |
  |                | ``projectMap``); it must exist in each zone of the pool, |                              |
  |                | be READY and be for the pool's machine type, else 400.   |                              |
  |                | Short capacity: operation DONE with ``error {code: 8}``  |                              |
  |                | GCE_STOCKOUT, pool ERROR with the text in                |                              |
  |                | ``conditions``/``statusMessage``.                        |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | GKE versions   | Flex-start TPU pools need 1.33.0-gke.1712000, TPU7x      | concepts/dws; concepts/tpu-  |
  |                | 1.34.0-gke.2201000 or later (``gkeVersion``, per cluster | ironwood                     |
  |                | too; compared numerically).                              |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Errors         | A broken rule answers 400 INVALID_ARGUMENT in the Google | reference gke-               |
  |                | envelope before the concurrent-operation check; texts    | compute-k8s-api.md 1.5       |
  |                | are modelled on GKE's, not copied.                       |                              |
  +----------------+----------------------------------------------------------+------------------------------+

  Sources: REST NodePool / NodePoolAutoscaling / Cluster
  https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters.nodePools ;
  gcloud https://cloud.google.com/sdk/gcloud/reference/container/node-pools/create ;
  zones https://cloud.google.com/tpu/docs/regions-zones ; shapes https://cloud.google.com/tpu/docs/v5e ,
  https://cloud.google.com/tpu/docs/v5p , https://cloud.google.com/tpu/docs/v6e ,
  https://docs.cloud.google.com/tpu/docs/tpu7x ; TPUs in GKE Standard
  https://cloud.google.com/kubernetes-engine/docs/how-to/tpus ; Ironwood
  https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood ; flex-start
  https://cloud.google.com/kubernetes-engine/docs/concepts/dws ; shared reservations
  https://cloud.google.com/compute/docs/instances/reservations-shared ; consuming reservations in GKE
  https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations ; xpk PR #822
  https://github.com/AI-Hypercomputer/xpk/pull/822 .
* What ``falcon cluster check`` reads besides: Compute ``machineTypes.get`` (a TPU type only in the zones
  offering it), Resource Manager v1 ``projects.testIamPermissions`` (``iam_api``: the project's configured
  ``iamPermissions``, default all; ``{}`` when none is held) and Cloud Storage ``buckets.getIamPolicy``
  (``storage_api``: the bucket's ``writers`` bound to ``roles/storage.objectUser``). References:
  https://cloud.google.com/resource-manager/reference/rest/v1/projects/testIamPermissions ;
  https://cloud.google.com/storage/docs/json_api/v1/buckets/getIamPolicy ;
  https://cloud.google.com/compute/docs/reference/rest/v1/machineTypes/get .
* Kubernetes, one independent API per cluster under ``/k8s/<p>/<l>/<c>``: namespaces, nodes, pods (+log),
  events, services, serviceaccounts, secrets (``stringData`` merged into base64 ``data``, ``secrets``),
  batch/v1 jobs; list (label selectors with equality and set-based terms,
  field selectors, limit/continue), get, create (no Content-Type = JSON, dryRun), merge/strategic/JSON patch,
  PUT with resourceVersion conflicts, a ``metadata.uid`` that is not the object's refused (PUT 409, PATCH
  422), delete (Job propagation Orphan by default, Background, Foreground), and
  watch (NDJSON, resume from resourceVersion, 410 Expired once compacted, timeoutSeconds, bookmarks, DELETED
  with the final state, DELETED when an object stops matching the selector). Errors are ``Status`` objects.
  Events are deduplicated (count/lastTimestamp) and expire after ``eventTtlSeconds``.
  Once the emulator begins to stop, every open watch ends and each new request gets kube-apiserver's
  answer after its shutdown delay (the WithRetryAfter filter of k8s.io/apiserver): 429, plain text
  "The apiserver is shutting down, please try again later.", ``Retry-After: 5``, ``Connection: close``.
* Custom resources (``crds``, ``cel_rules``): CRDs validated as the API server does, their objects pruned,
  defaulted and validated by the structural schema and by x-kubernetes-validations with a real CEL
  (common-expression-language), status subresource and generation; apps/v1 Deployments and StatefulSets
  with the autoscaling/v1 /scale subresource (``apps``).
* Controllers, advanced by one asyncio loop every ``tickSeconds``: ServiceAccount controller, Job controller
  (parallelism/completions, Indexed mode, backoffLimit, activeDeadlineSeconds, FailureTarget -> Failed,
  SuccessCriteriaMet -> Complete, ttlSecondsAfterFinished, suspend with its Suspended condition and
  Suspended/Resumed events, startTime restarted on resume), scheduler (nodeSelector, required node
  affinity, taints/tolerations, ``google.com/tpu`` capacity, pod count, FailedScheduling events), kubelet
  (ContainerCreating -> Running -> terminated, scripted by EMULATOR_RUN_SECONDS / EMULATOR_EXIT_CODE /
  EMULATOR_OOM / EMULATOR_STDOUT; env ``secretKeyRef`` read from the Secret, a missing one holding the
  container in CreateContainerConfigError).
* A cluster with ``runsCommands: true`` stands in for a central cluster: its kubelet runs each container's
  command and args as a local process (``processes``: the image ignored, the emulator's Python as its
  stand-in, the pod's env, output as the log, exit status as the container's, SIGTERM then SIGKILL when
  the pod is deleted). ``nodePools`` gives a cluster node pools it has from the start (GKE's
  ``default-pool``), for pods that need no TPU. Reference:
  https://kubernetes.io/docs/concepts/configuration/secret/ ;
  https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/ (termination).
* What GKE's admission and kubelet judge in a pod (modules ``admission``, ``service_accounts``, ``tpu``,
  ``gcsfuse``, ``images``, ``kubelet``), each rule with its documentation source:

  +----------------+----------------------------------------------------------+------------------------------+
  | rule           | what the emulator does                                   | source                       |
  +================+==========================================================+==============================+
  | ServiceAccount | Every namespace gets a ``default`` ServiceAccount when   | kubernetes.io Service        |
  | controller     | it is created, and again if it is deleted; the cluster   | Accounts;                    |
  |                | config's ``serviceAccounts`` (``namespace/name``) appear | kube-controller-manager      |
  |                | with their namespace.                                    | serviceaccounts-controller   |
  +----------------+----------------------------------------------------------+------------------------------+
  | ServiceAccount | A pod naming a missing ``serviceAccountName`` is         | k8s ServiceAccount admission |
  | admission      | refused: 403 ``pods "<name or generateName>" is          | plugin,                      |
  |                | forbidden: error looking up service account <ns>/<sa>:   | admission.NewForbidden; Job  |
  |                | serviceaccount "<sa>" not found``. The Job controller    | controller FailedCreate      |
  |                | creates no pod, records Warning ``FailedCreate`` ``Error |                              |
  |                | creating: <that text>`` on the Job (bumped at most once  |                              |
  |                | a second) and retries every sync until the account       |                              |
  |                | exists.                                                  |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | TPU webhook    | A pod requesting ``google.com/tpu`` whose Job is Indexed | GKE Deploy TPU workloads in  |
  |                | with ``parallelism > 1`` and whose template has          | GKE Standard (multi-host);   |
  |                | ``subdomain`` gets, in each TPU container,               | GKE TPU device plugin        |
  |                | ``TPU_WORKER_ID`` = completion index and                 | InitEnvs                     |
  |                | ``TPU_WORKER_HOSTNAMES`` = ``<job>-<i>.<subdomain>`` for |                              |
  |                | every index. Nothing else is injected for a multi-host   |                              |
  |                | slice (GKE's device plugin sets ``localhost`` only on    |                              |
  |                | single-host slices).                                     |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Slice          | A TPU container on a node whose slice has more than one  | kubernetes.io DNS for        |
  | rendezvous     | host (topology chips / ``google.com/tpu`` per node) runs | Services and Pods; Job with  |
  |                | only once every ``TPU_WORKER_HOSTNAMES`` entry resolves: | Pod-to-Pod Communication     |
  |                | a Running pod with that hostname.subdomain selected by a |                              |
  |                | headless Service (``clusterIP: None``) named as the      |                              |
  |                | subdomain in its namespace. Until then it is Running,    |                              |
  |                | not Ready (``ContainersNotReady``), never finishes, and  |                              |
  |                | its log says why. Single-host pods need nothing.         |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | GCS FUSE       | Only a pod annotated ``gke-gcsfuse/volumes: "true"``     | gcs-fuse-csi-driver webhook  |
  | sidecar        | gets the ``gke-gcsfuse-sidecar`` native sidecar (init    | sidecar_spec.go              |
  |                | container, ``restartPolicy: Always``) and its            |                              |
  |                | tmp/buffer/cache emptyDirs.                              |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | GCS FUSE mount | A gcsfuse CSI volume mounts only with the sidecar and    | gcs-fuse-csi-driver          |
  |                | when                                                     | docs/troubleshooting.md,     |
  |                | ``serviceAccount:<project>.svc.id.goog[<ns>/<ksa>]`` is  | docs/authentication.md;      |
  |                | a writer of the bucket in the cluster's project config   | kubelet volume manager       |
  |                | (an unconfigured bucket is unreadable). Otherwise        | back-off                     |
  |                | Warning ``FailedMount`` ``MountVolume.SetUp failed for   |                              |
  |                | volume ...`` with ``code = FailedPrecondition desc =     |                              |
  |                | failed to find the sidecar container in Pod spec`` or    |                              |
  |                | ``code = PermissionDenied desc = failed to get GCS       |                              |
  |                | bucket ...: googleapi: Error 403: ...``, retried from    |                              |
  |                | 0.5 s doubling to 122 s; the pod stays                   |                              |
  |                | Pending/ContainerCreating.                               |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Image          | A reference outside the distribution/reference grammar   | kubelet                      |
  | references     | gives waiting ``InvalidImageName``, Warning              | images/image_manager.go;     |
  |                | ``InspectFailed`` ``Failed to apply default image tag    | distribution/reference       |
  |                | ...: couldn't parse image name ...: invalid reference    | regexp.go                    |
  |                | format`` and ``Failed`` ``Error: InvalidImageName``.     |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Image pulls    | A ``:missing`` tag never pulls: ``ErrImagePull`` with    | kubelet                      |
  |                | Normal ``Pulling``, Warning ``Failed`` ``Failed to pull  | images/image_manager.go      |
  |                | image "<image>": rpc error: code = NotFound desc =       | (BackOff is a Normal event); |
  |                | failed to pull and unpack image ...`` and ``Error:       | containerd NotFound text     |
  |                | ErrImagePull``; then ``ImagePullBackOff`` with Normal    |                              |
  |                | ``BackOff`` ``Back-off pulling image "<image>"`` and     |                              |
  |                | Warning ``Error: ImagePullBackOff``; pulls are retried   |                              |
  |                | with a doubling back-off.                                |                              |
  +----------------+----------------------------------------------------------+------------------------------+
  | Logs           | ``pods/NAME/log`` returns synthetic stdout (start line,  | containers are not run       |
  |                | EMULATOR_STDOUT, exit line). The emulator writes no      |                              |
  |                | file: a log in a bucket is whatever the container itself |                              |
  |                | writes.                                                  |                              |
  +----------------+----------------------------------------------------------+------------------------------+
* Admin: ``GET /emulator/state`` (pools, reservations, per cluster the Job creations accepted and
  refused as duplicates, the Job names created more than once and run (pods made) by more than one Job
  object, faults injected by kind), ``POST/GET/DELETE /emulator/faults`` (faults.py:
  an HTTP error in each API's own shape, a delay past the client's timeout after which the request is
  still carried out, a connection reset with no response, a probability from a seeded RNG, a duration),
  ``POST /emulator/clusters/<p>/<l>/<c>/compact`` (forget watch history),
  ``POST /emulator/clusters/<p>/<l>/<c>/nodePools/<pool>/break`` with ``{"message": ...}`` (the pool goes
  to ERROR with that statusMessage, a running create ends with it, as on a stockout or a failed
  repair), ``POST /emulator/clusters/<p>/<l>/<c>/nodePools/<pool>/vanish`` (the pool is gone at once,
  even mid-create), ``POST /emulator/clusters/<p>/<l>/<c>/upgrade`` with ``{"seconds": N}`` (a
  control-plane upgrade, a cluster-level operation during which every node-pool operation gets 400
  "Cluster is running incompatible operation ..."), ``GET /healthz``.

KNOWN FIDELITY GAPS
-------------------
* GKE: only the routes above; setSize, setAutoscaling, update, rollback and cancel answer 501. No
  ``queuedProvisioning``/ProvisioningRequest, spot preemption, maintenance, auto-repair, or idle scale-down
  of flex-start/autoscaled nodes; no quotas but the node-pool operations' (other 429s only through fault
  injection); no cluster-level operations of GKE's own but the admin API's upgrade. PENDING is never observed
  (operations start RUNNING) and progress/stages are not reported. Node-pool rules are those of the table
  only: error texts approximate GKE's; the zone offer is a snapshot of the regions-zones page (no AI zones,
  no per-zone flex-start list from the DWS page, no stock per zone); non-TPU machine types are accepted by
  their naming pattern in any zone; a workload policy is checked for its type and acceleratorTopology
  only (not acceleratorTopologyMode/maxTopologyDistance) and a non-TPU pool naming a policy is held to the
  same check; ``tpu7x-standard-1t`` is unknown (only xpk lists it). Non-flex pools get all their nodes
  (initialNodeCount per zone, else the autoscaling maximum) when the create operation ends; a pending pod
  never scales a non-flex pool.
* Compute: reservations are read-only and configured up front (no insert/delete/resize); sharing is
  ``shareSettings`` only (no IAM); no aggregate (chip-counted) reservations; assuredCount always equals
  count. Resource policies: no patch, IAM or aggregated list; their operations are DONE at once.
* Kubernetes: no authentication/RBAC, no admission webhooks or plugins besides those in the table above
  (no LimitRanger, ResourceQuota, PodSecurity), no ConfigMaps/Secrets/ReplicaSets/DaemonSets; Deployments
  and StatefulSets run no pods (status follows spec.replicas at once); CRDs without conversion, CEL cost
  estimates or rule type-checking (see ``crds``/``cel_rules``); ServiceAccounts
  without token Secrets or the TokenRequest API, no deletecollection, no server-side apply (apply
  patches merge like merge-patch), strategic merge treats lists as atomic, field selectors accept any dotted
  path, limit/continue is an offset over the live list (no snapshot), BOOKMARKs only on idle streams, one
  resourceVersion counter shared by all clusters, namespace deletion is immediate (no Terminating phase) and
  removes its objects without graceful termination. Job DELETE answers a Status (real servers may return the
  Job). envFrom and secret/configMap env references are not resolved.
* Job controller: no backoff delay between retries, no podFailurePolicy, successPolicy,
  backoffLimitPerIndex, managedBy or pod finalizer tracking; restartPolicy OnFailure runs like Never. Zero
  active/succeeded/failed counts are omitted (omitempty), ready/terminating are always present.
* Scheduler: only google.com/tpu and the pod count are resources (cpu/memory requests are not checked); no
  preemption, priorities, pod (anti-)affinity, topology spread or preferred node affinity.
* Kubelet: containers are not run; init containers are reported Completed at start (native sidecars
  Running until the pod ends); no restarts, CrashLoopBackOff, probes, limit enforcement, or ``follow=true``
  log streaming (the current text is returned). Pods on a deleted node end Failed
  (DisruptionTarget/DeletionByPodGC) but are not garbage collected. Pulls fail only for a ``:missing`` tag
  (no registry, no auth errors, no ErrImageNeverPull). A waiting multi-host TPU container is not Ready: on
  GKE a container without a readiness probe is Ready while it hangs, so Ready alone does not show the hang
  there. DNS is modelled only for that rendezvous (Running pods are published whether Ready or not, and
  ``publishNotReadyAddresses`` is not looked at).
* GCS FUSE: inline CSI volumes only (not PV/PVC); IAM is the config's ``writers`` list (no reader roles, no
  ``principal://`` members, no bucket-level vs uniform access, no Workload Identity propagation delay);
  ``skipCSIBucketAccessCheck`` is ignored (access is always checked at mount); no NotFound for missing
  buckets (unconfigured buckets answer 403); the sidecar's own failures (OOM, bad mount options) are not
  modelled.
"""

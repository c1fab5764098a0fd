"""Local emulator of the GKE, Compute and Kubernetes APIs that Falcon talks to, on one plain-HTTP port.

Falcon's production adapters use the official clients (``container_v1.ClusterManagerClient`` with
``transport="rest"``, ``compute_v1.ReservationsClient``, ``kubernetes.client``); in local/test mode they are
pointed at this emulator. Entry points: ``falcon_emulator.config.EmulatorConfig``,
``falcon_emulator.app.create_app`` and ``falcon_emulator.server.{EmulatorServer, serve}``.

What is modelled
----------------
* GKE ``/v1/projects/*/locations/*/...``: clusters get/list (``endpoint`` = ``<host:port>/k8s/<p>/<l>/<c>``,
  dummy base64 CA), node pools create/get/list/delete, operations get/list. Bodies are parsed with the real
  ``container_v1.NodePool`` proto (int or string enums, unknown fields ignored, missing = default); responses
  use string enums and the Google error envelope. Operations go RUNNING -> DONE after
  ``nodePoolProvisionSeconds``; 409 ALREADY_EXISTS on a duplicate pool, 400 FAILED_PRECONDITION while another
  node-pool operation runs on the cluster (``rejectConcurrentOperations``), 404 for unknown things.
* Node pools: PROVISIONING -> RUNNING / ERROR (with ``conditions``), STOPPING -> gone (nodes deleted, their
  pods end Failed). Reservation pools (SPECIFIC_RESERVATION, by name or ``projects/P/reservations/R``) take
  ``inUseCount`` per node and end with ``error.code 8`` (GCE_STOCKOUT) when the reservation is short;
  deletion gives the capacity back. Flex-start pools complete with 0 nodes and get the whole slice at once
  ``flexStart.delaySeconds`` after a pending pod that fits them appears (TriggeredScaleUp event), or never
  when ``flexStart.available`` is false (NotTriggerScaleUp + FailedScheduling). Nodes carry the GKE labels
  (nodepool, tpu-accelerator, tpu-topology, flex-start, spot, reservation-name, zone, instance-type), the
  ``google.com/tpu=present:NoSchedule`` taint, ``google.com/tpu`` allocatable and a Ready condition.
* Compute ``/compute/v1/projects/*/zones/*/reservations[/*]`` and the aggregated list, with int64 counts as
  strings; ``inUseCount`` follows the reservation pools' nodes.
* Kubernetes, one independent API per cluster under ``/k8s/<p>/<l>/<c>``: namespaces, nodes, pods (+log),
  events, services, batch/v1 jobs; list (label selectors with equality and set-based terms, field
  selectors, limit/continue), get, create (no Content-Type = JSON, dryRun), merge/strategic/JSON patch, PUT
  with resourceVersion conflicts, delete (Job propagation Orphan by default, Background, Foreground), and
  watch (NDJSON, resume from resourceVersion, 410 Expired once compacted, timeoutSeconds, bookmarks,
  DELETED with the final state, DELETED when an object stops matching the selector). Errors are ``Status``
  objects. Events are deduplicated (count/lastTimestamp) and expire after ``eventTtlSeconds``.
* Controllers, advanced by one asyncio loop every ``tickSeconds``: Job controller (parallelism/completions,
  Indexed mode, backoffLimit, activeDeadlineSeconds, FailureTarget -> Failed, SuccessCriteriaMet ->
  Complete, ttlSecondsAfterFinished, suspend), scheduler (nodeSelector, required node affinity,
  taints/tolerations, ``google.com/tpu`` capacity, pod count, FailedScheduling events), kubelet
  (ContainerCreating -> Running -> terminated, scripted by EMULATOR_RUN_SECONDS / EMULATOR_EXIT_CODE /
  EMULATOR_OOM / EMULATOR_STDOUT; image tag ``:missing`` -> ErrImagePull -> ImagePullBackOff), synthetic
  stdout written to ``<data_dir>/gcs/<bucket>/<object>`` when FALCON_LOG_FILE lies under a gcsfuse CSI mount.
* Admin: ``GET /emulator/state``, ``POST/GET/DELETE /emulator/faults``,
  ``POST /emulator/clusters/<p>/<l>/<c>/compact`` (forget watch history), ``GET /healthz``.

KNOWN FIDELITY GAPS
-------------------
* GKE: only the routes above; setSize, setAutoscaling, update, rollback and cancel answer 501. No
  ``queuedProvisioning``/ProvisioningRequest, spot preemption, maintenance, auto-repair, or idle scale-down
  of flex-start/autoscaled nodes; no quotas (429 only through fault injection). PENDING is never observed
  (operations start RUNNING) and progress/stages are not reported. Node-pool validation is minimal (TPU
  topology vs machine type, tpuTopology on single-host pools and zones are not checked). Non-flex pools get
  all their nodes (initialNodeCount, else autoscaling max) when the create operation ends; a pending pod never
  scales a non-flex pool.
* Compute: reservations are read-only and configured up front; no aggregate (chip-counted) reservations, no
  shared-reservation permissions; assuredCount always equals count.
* Kubernetes: no authentication/RBAC, no admission webhooks (the gcsfuse sidecar is not injected), no
  Deployments/ConfigMaps/Secrets/ServiceAccounts/CRDs, no deletecollection, no server-side apply (apply
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
* Kubelet: containers are not run; init containers are reported Completed at start; no restarts,
  CrashLoopBackOff, probes, limit enforcement, or ``follow=true`` log streaming (the current text is
  returned). Pods on a deleted node end Failed (DisruptionTarget/DeletionByPodGC) but are not garbage
  collected. gcsfuse logs: inline CSI volumes only (not PV/PVC), ``only-dir`` and ``subPath`` honoured, the
  file grows at container start and exit (a real GCS object appears only when the writer closes it).
"""

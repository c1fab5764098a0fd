#!/usr/bin/env bash
# Onboard one edge cluster for Falcon (infra/README.md, "Onboarding an edge cluster"):
#   1. the custom role falcon_controller in the cluster's project, granted to Falcon's account;
#   2. namespace falcon-jobs and the Job service account falcon-job, bound by Workload Identity
#      to JOB_GSA, which may write the cluster's bucket (GCS FUSE log volume);
#   3. the TidalScheduler CRD and the controller's RBAC for Falcon's account.
# Every step can run again: creates become updates, bindings are idempotent.
#
# Run from the repository root by someone with roles/owner (or IAM admin + container admin) on
# PROJECT_ID and storage admin on BUCKET. Then register the cluster: falcon cluster add ...
#
#   PROJECT_ID=tpu-project-a LOCATION=us-east5 CLUSTER=edge-a BUCKET=edge-a-logs \
#   CONTROLLER_GSA=cluster-controller@tpu-service-473302.iam.gserviceaccount.com \
#   infra/edge/bootstrap.sh
set -euo pipefail

: "${PROJECT_ID:?the project of the edge cluster}"
: "${LOCATION:?the region or zone of the cluster}"
: "${CLUSTER:?the name of the cluster}"
: "${BUCKET:?the log bucket of the cluster (clusters.gcs_bucket), without gs://}"
: "${CONTROLLER_GSA:?the Google service account Falcon runs as (cluster-controller@CENTRAL_PROJECT.iam.gserviceaccount.com)}"
JOB_GSA="${JOB_GSA:-falcon-job@${PROJECT_ID}.iam.gserviceaccount.com}"
NAMESPACE="${NAMESPACE:-falcon-jobs}"
JOB_KSA="${JOB_KSA:-falcon-job}"
SCALE_MODE="${SCALE_MODE:-false}" # true: also install infra/tidal-scheduler/rbac-scale.yaml
ROLE_FILE=infra/iam/falcon-controller-role.yaml
ROLE="projects/${PROJECT_ID}/roles/falcon_controller"

echo "== 0. ${CLUSTER}: Workload Identity and the GCS FUSE CSI driver"
describe() {
  gcloud container clusters describe "$CLUSTER" --location="$LOCATION" --project="$PROJECT_ID" \
    --format="value($1)"
}
pool="$(describe workloadIdentityConfig.workloadPool)"
fuse="$(describe addonsConfig.gcsFuseCsiDriverConfig.enabled)"
if [[ "$pool" != "${PROJECT_ID}.svc.id.goog" || "${fuse,,}" != true ]]; then
  echo "enable them first: gcloud container clusters update ${CLUSTER} --location=${LOCATION}" \
    "--project=${PROJECT_ID} --workload-pool=${PROJECT_ID}.svc.id.goog" \
    "--update-addons=GcsFuseCsiDriver=ENABLED (workload pool: '${pool}', GCS FUSE: '${fuse}')" >&2
  exit 1
fi

echo "== 1. role falcon_controller in ${PROJECT_ID}, granted to ${CONTROLLER_GSA}"
if gcloud iam roles describe falcon_controller --project="$PROJECT_ID" >/dev/null 2>&1; then
  gcloud iam roles update falcon_controller --project="$PROJECT_ID" --file="$ROLE_FILE" --quiet
else
  gcloud iam roles create falcon_controller --project="$PROJECT_ID" --file="$ROLE_FILE"
fi
gcloud projects add-iam-policy-binding "$PROJECT_ID" \
  --member="serviceAccount:${CONTROLLER_GSA}" --role="$ROLE" --condition=None >/dev/null

echo "== 2. ${NAMESPACE}/${JOB_KSA} as ${JOB_GSA}, objectUser on gs://${BUCKET}"
gcloud container clusters get-credentials "$CLUSTER" --location="$LOCATION" --project="$PROJECT_ID"
if [[ "$NAMESPACE" == falcon-jobs && "$JOB_KSA" == falcon-job ]]; then
  kubectl apply -f infra/edge/namespace.yaml -f infra/edge/job-serviceaccount.yaml
else # the cluster registered with another namespace or KSA name
  kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
  kubectl create serviceaccount "$JOB_KSA" -n "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
fi
kubectl annotate serviceaccount "$JOB_KSA" -n "$NAMESPACE" --overwrite \
  "iam.gke.io/gcp-service-account=${JOB_GSA}"
if ! gcloud iam service-accounts describe "$JOB_GSA" >/dev/null 2>&1; then
  [[ "$JOB_GSA" == *"@${PROJECT_ID}.iam.gserviceaccount.com" ]] || {
    echo "JOB_GSA ${JOB_GSA} does not exist; create it in its own project first" >&2
    exit 1
  }
  gcloud iam service-accounts create "${JOB_GSA%%@*}" --project="$PROJECT_ID" \
    --display-name="Falcon Jobs (log bucket writer)"
fi
gcloud iam service-accounts add-iam-policy-binding "$JOB_GSA" \
  --role=roles/iam.workloadIdentityUser \
  --member="serviceAccount:${PROJECT_ID}.svc.id.goog[${NAMESPACE}/${JOB_KSA}]" >/dev/null
gcloud storage buckets add-iam-policy-binding "gs://${BUCKET}" \
  --member="serviceAccount:${JOB_GSA}" --role=roles/storage.objectUser >/dev/null

echo "== 3. TidalScheduler CRD and RBAC for ${CONTROLLER_GSA}"
kubectl apply -f infra/tidal-scheduler/crd.yaml
rbac_files=(infra/tidal-scheduler/rbac.yaml)
if [[ "$SCALE_MODE" == true ]]; then
  rbac_files+=(infra/tidal-scheduler/rbac-scale.yaml)
fi
for file in "${rbac_files[@]}"; do
  sed "s/cluster-controller@PROJECT_ID.iam.gserviceaccount.com/${CONTROLLER_GSA}/" "$file" | kubectl apply -f -
done

echo "done: ${CLUSTER} is ready to register (namespace ${NAMESPACE}, FALCON_JOB_SERVICE_ACCOUNT=${JOB_KSA})"

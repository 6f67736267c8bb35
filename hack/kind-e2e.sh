#!/usr/bin/env bash
# End-to-end test of `gpufleet scheduler` on a kind cluster with fake GPUs.
#
#   *** NOT RUN BY CI: CI has no container engine. Run it by hand (needs docker, kind, kubectl). ***
#
# What it does: builds the gpufleet image, creates a kind cluster (1 control plane, 2 workers), installs the
# CRDs and deploy/, advertises 4 fake nvidia.com/gpu on each worker (an extended resource plus the labels and
# gpufleet.io/gpus inventory a GPU node would carry), then checks:
#   1. a 1-GPU pod is bound, with the device annotation written, a Scheduled event and ClusterQueue status;
#   2. a gang of 4 does not start while only 3 GPUs are free, then starts whole once capacity frees;
#   3. deleting the leader's pod hands the Lease over and the new leader binds the next pod.
# Environment: CLUSTER (default gpufleet-e2e), KEEP=1 keeps the cluster, IMAGE (default the deploy/ image).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${CLUSTER:-gpufleet-e2e}"
IMAGE="${IMAGE:-$(sed -n 's/^ *image: *//p' "$ROOT/deploy/deployment.yaml" | head -1)}"
NS=gpufleet-system
TEAM=e2e

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "missing $tool: this script needs docker, kind and kubectl" >&2; exit 2; }
done

say() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; kubectl -n "$NS" logs deploy/gpufleet-scheduler --tail=50 >&2 || true; exit 1; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out waiting for $what"
    sleep 2
  done
}
cleanup() { [[ "${KEEP:-0}" == 1 ]] || kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "image $IMAGE"
CONTEXT="$(mktemp -d)"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/src" "$CONTEXT/"
cat >"$CONTEXT/Dockerfile" <<'DOCKERFILE'
FROM python:3.11-slim
COPY . /src
# prometheus-client until it is listed in pyproject.toml's dependencies.
RUN pip install --no-cache-dir /src prometheus-client && rm -rf /src
USER 65532:65532
DOCKERFILE
docker build -q -t "$IMAGE" "$CONTEXT"
rm -rf "$CONTEXT"

say "kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s --config - <<'KIND'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
- role: worker
- role: worker
KIND
kind load docker-image --name "$CLUSTER" "$IMAGE"

say "install gpufleet"
kubectl apply -f "$ROOT/deploy/crds/"
for f in namespace serviceaccount rbac configmap deployment poddisruptionbudget service; do
  kubectl apply -f "$ROOT/deploy/$f.yaml"
done
kubectl -n "$NS" rollout status deploy/gpufleet-scheduler --timeout=180s

say "fake GPUs: 4 per worker"
for node in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
  name="${node#node/}"
  # An extended resource on the node status is kept by the kubelet; pods requesting it run as usual.
  kubectl patch "$node" --subresource=status --type=merge -p '{"status":{"capacity":{"nvidia.com/gpu":"4"}}}'
  uuids=$(printf '{"index":%d,"uuid":"GPU-%s-%d"},' 0 "$name" 0 1 "$name" 1 2 "$name" 2 3 "$name" 3)
  inventory="{\"model\":\"A100-SXM4-80GB\",\"memoryMiB\":81920,\"sharing\":{\"migStrategy\":\"none\",\"timeSlicing\":{}},\"gpus\":[${uuids%,}],\"nvlinks\":[]}"
  kubectl label --overwrite "$node" nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB nvidia.com/gpu.count=4
  kubectl annotate --overwrite "$node" "gpufleet.io/gpus=$inventory"
done

say "queues"
kubectl create namespace "$TEAM" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<YAML
apiVersion: gpufleet.io/v1alpha1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}}
---
apiVersion: gpufleet.io/v1alpha1
kind: ClusterQueue
metadata: {name: e2e}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 100}
      - {name: memory, nominalQuota: 100Gi}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: gpufleet.io/v1alpha1
kind: LocalQueue
metadata: {name: team, namespace: $TEAM}
spec: {clusterQueue: e2e}
YAML

gpu_pod() {  # gpu_pod NAME [GROUP SIZE]
  local labels="kueue.x-k8s.io/queue-name: team" notes="{}"
  if [[ $# -ge 3 ]]; then
    labels="$labels, kueue.x-k8s.io/pod-group-name: $2"
    notes="{kueue.x-k8s.io/pod-group-total-count: \"$3\"}"
  fi
  kubectl -n "$TEAM" apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {$labels}, annotations: $notes}
spec:
  schedulerName: gpufleet
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 10m, memory: 16Mi, nvidia.com/gpu: 1}
      limits: {nvidia.com/gpu: 1}
YAML
}
node_of() { kubectl -n "$TEAM" get pod "$1" -o jsonpath='{.spec.nodeName}'; }
bound() { [[ -n "$(node_of "$1")" ]]; }

say "1. a GPU pod is bound with its device annotation"
gpu_pod single
wait_for 60 "single bound" bound single
devices=$(kubectl -n "$TEAM" get pod single -o jsonpath="{.metadata.annotations['gpufleet\.io/devices']}")
[[ "$devices" == *GPU-* ]] || fail "no gpufleet.io/devices annotation on single (got '$devices')"
kubectl -n "$TEAM" get events --field-selector reason=Scheduled,involvedObject.name=single -o name | grep -q . \
  || fail "no Scheduled event for single"
wait_for 30 "ClusterQueue status" sh -c \
  "kubectl get clusterqueue e2e -o jsonpath='{.status.admittedWorkloads}' | grep -qx 1"

say "2. a gang of 4 waits for capacity, then starts whole"
for i in 0 1 2 3; do gpu_pod "filler-$i"; done           # 5 of 8 GPUs taken
wait_for 60 "fillers bound" sh -c 'for i in 0 1 2 3; do [ -n "$(kubectl -n '"$TEAM"' get pod filler-$i -o jsonpath={.spec.nodeName})" ] || exit 1; done'
for i in 0 1 2 3; do gpu_pod "gang-$i" ring 4; done      # 3 free: must not start
sleep 10
for i in 0 1 2 3; do ! bound "gang-$i" || fail "gang-$i bound with only 3 GPUs free"; done
kubectl -n "$TEAM" get pod gang-0 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}' \
  | grep -qx Unschedulable || fail "gang-0 has no PodScheduled=False Unschedulable condition"
kubectl -n "$TEAM" delete pod filler-0 filler-1 --wait=true
wait_for 90 "the whole gang bound" sh -c 'for i in 0 1 2 3; do [ -n "$(kubectl -n '"$TEAM"' get pod gang-$i -o jsonpath={.spec.nodeName})" ] || exit 1; done'

say "3. leader failover"
holder=$(kubectl -n "$NS" get lease gpufleet-scheduler -o jsonpath='{.spec.holderIdentity}')
[[ -n "$holder" ]] || fail "nobody holds the Lease"
kubectl -n "$NS" delete pod "$holder" --wait=false
wait_for 60 "a new Lease holder" sh -c \
  "h=\$(kubectl -n $NS get lease gpufleet-scheduler -o jsonpath='{.spec.holderIdentity}'); [ -n \"\$h\" ] && [ \"\$h\" != '$holder' ]"
kubectl -n "$TEAM" delete pod filler-2 --wait=true
gpu_pod after-failover
wait_for 90 "after-failover bound" bound after-failover

say "PASS"

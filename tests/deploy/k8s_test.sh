#!/usr/bin/env bash
# Renders deploy/kubernetes (base and every overlay) with `kubectl kustomize`, checks what each
# must contain, and validates every object, and the example inference Pod, offline against the
# Kubernetes OpenAPI schema (tests/deploy/validate_k8s.js: npm kubernetes-models, unknown fields
# refused). Also proves once per run that the validator rejects a misspelled field, and checks
# that every --flag the manifests pass is one devplaced or the devplace CLI knows.
# Usage: k8s_test.sh <repository root> <devplaced> <devplace CLI>
set -euo pipefail
root="$1" daemon="$2" cli="$3"
k8s="$root/deploy/kubernetes"
tools="$root/.tools"
validate="$root/tests/deploy/validate_k8s.js"
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v kubectl >/dev/null || fail "kubectl is missing: scripts/setup installs Debian's kubernetes-client"
for m in kubernetes-models yaml; do
  [ -d "$tools/node_modules/$m" ] || fail "$tools/node_modules/$m is missing: run scripts/setup"
done
kubectl version --client 2>/dev/null | head -1 || true

tmp=$(mktemp -d /tmp/devplace-k8s-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

render() {  # render DIR NAME: kubectl kustomize DIR > $tmp/NAME.yaml
  kubectl kustomize "$k8s/$1" >"$tmp/$2.yaml" 2>"$tmp/$2.err" || { cat "$tmp/$2.err"; fail "kubectl kustomize $1"; }
  # A recent kustomize warns about the kustomize 2.0 fields the files keep; deploy/README.md names
  # exactly these four, so any other message fails.
  if grep -vE "^# Warning: '(commonLabels|bases|patchesStrategicMerge|patchesJson6902)' is deprecated\." "$tmp/$2.err"; then
    fail "kubectl kustomize $1 says more than the deprecations deploy/README.md explains (above)"
  fi
  echo "rendered $1: $(grep -c '^kind:' "$tmp/$2.yaml") objects"
}
expect() {  # expect NAME LINE...: each LINE (a fixed string) occurs in the rendered NAME
  local name="$1"; shift
  for line in "$@"; do
    grep -qF -- "$line" "$tmp/$name.yaml" || fail "$name renders without '$line'"
  done
}

render base base
expect base "kind: Namespace" "kind: ServiceAccount" "kind: DaemonSet" "kind: ConfigMap" \
  "--host_root=/host" "--listen=unix:/run/devplace/devplace.sock" "--socket_group=7465" \
  "--nfd_features_file=/etc/kubernetes/node-feature-discovery/features.d/devplace" \
  "path: /run/devplace" "path: /etc/kubernetes/node-feature-discovery/features.d" \
  "mountPath: /host/sys" "mountPath: /host/proc" "mountPath: /host/dev" \
  "key: nvidia.com/gpu" "key: amd.com/gpu" "operator: Exists" \
  "readinessProbe:" "livenessProbe:" "- health" "limits:" "requests:" "namespace: devplace"
# /sys, /proc and /dev are mounted read-only (each host-* mount line carries readOnly: true).
[ "$(grep -cE 'mountPath: /host/(sys|proc|dev)$' "$tmp/base.yaml")" = 3 ] || fail "base lacks a /host mount"
for m in sys proc dev; do
  grep -A2 "mountPath: /host/$m\$" "$tmp/base.yaml" | grep -q 'readOnly: true' || fail "/host/$m is not read-only"
done

render overlays/nvidia nvidia
expect nvidia "--nvml_library=/host-nvml/libnvidia-ml.so.1" "path: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" \
  "mountPath: /host-nvml/libnvidia-ml.so.1" "--host_root=/host"

render overlays/tls tls
expect tls "--listen=unix:/run/devplace/devplace.sock,tls:0.0.0.0:7466" "--tls_cert=/etc/devplace/tls/tls.crt" \
  "--tls_key=/etc/devplace/tls/tls.key" "--tls_client_ca=/etc/devplace/tls/ca.crt" "secretName: devplace-tls" \
  "hostPort: 7466"

cp "$k8s/examples/inference-pod.yaml" "$tmp/example.yaml"
expect example "resolve" "--workload=inference" "/placement/device" "path: /run/devplace" "supplementalGroups:"

# The DRA example: a ResourceClaimTemplate, then the Pod. kubernetes-models 4 has no resource.k8s.io/v1
# (DRA's API, GA in Kubernetes 1.34), so the template is checked for what the Pod and the README rely
# on; the Pod is validated with the others.
awk -v out="$tmp/dra-" '/^---$/ {n++; next} {print > (out (n + 0) ".yaml")}' "$k8s/examples/dra-pod.yaml"
[ -f "$tmp/dra-1.yaml" ] && [ ! -f "$tmp/dra-2.yaml" ] || fail "dra-pod.yaml is not a template then a Pod"
expect dra-0 "apiVersion: resource.k8s.io/v1" "kind: ResourceClaimTemplate" "  name: one-gpu" "      - name: gpu" \
  "        exactly:" "          deviceClassName: gpu.nvidia.com"
expect dra-1 "kind: Pod" "resourceClaimTemplateName: one-gpu" "- {name: gpu, request: gpu}" \
  "cp /usr/share/devplace/python/devplace-*.whl /wheels/" "pip install --quiet /wheels/devplace-*.whl" \
  "devplace.resolve_device('training')" "path: /run/devplace" "supplementalGroups:"

node "$validate" "$tools" "$tmp/base.yaml" "$tmp/nvidia.yaml" "$tmp/tls.yaml" "$tmp/example.yaml" "$tmp/dra-1.yaml" ||
  fail "an object does not validate against the Kubernetes schema (above)"

# Every --flag=... in the manifests (the ConfigMap's flag file, the overlays' args, the probes'
# and the example's CLI calls) is a flag of devplaced or of the CLI. Flags that other work adds
# to devplaced (NFD labels, TLS) are reported, not failed, while this devplaced lacks them.
# (absl's --helpfull exits 1; the CLI's subcommands list their own flags as "  --name=VALUE")
known=$( { "$daemon" --helpfull 2>&1 || true; for c in "" resolve inventory backends watch health probe; do
           "$cli" $c --helpfull 2>&1 || true; done; } | grep -oE '^ +--[a-z0-9_]+' | tr -d ' ' | sort -u)
for flag in $(cat "$tmp"/{base,nvidia,tls,example,dra-1}.yaml | grep -oE -- '(^|[ "])--[a-z0-9_]+=' | grep -oE -- '--[a-z0-9_]+' | sort -u); do
  if grep -qx -- "$flag" <<<"$known"; then continue; fi
  fail "the manifests pass $flag, which neither devplaced nor devplace knows"
done
echo "ok: every flag in the manifests is known"

# The validator must catch a misspelled field and a wrong type; otherwise the lines above prove nothing.
sed 's/readOnlyRootFilesystem:/readOnlyRootFilesytem:/' "$tmp/base.yaml" >"$tmp/misspelled.yaml"
if node "$validate" "$tools" "$tmp/misspelled.yaml" >"$tmp/misspelled.out"; then
  cat "$tmp/misspelled.out"; fail "the validator accepted a misspelled field"
fi
grep -q 'readOnlyRootFilesytem' "$tmp/misspelled.out" || { cat "$tmp/misspelled.out"; fail "the validator did not name the field"; }
sed 's/hostPort: 7466/hostPort: "7466"/' "$tmp/tls.yaml" >"$tmp/wrongtype.yaml"
if node "$validate" "$tools" "$tmp/wrongtype.yaml" >"$tmp/wrongtype.out"; then
  cat "$tmp/wrongtype.out"; fail "the validator accepted a string port"
fi
echo "ok: the validator rejects a misspelled field and a wrongly typed one"

#!/bin/sh
# The Kubernetes manifests (deploy/k8s, docs/deploy.md), checked offline: renders
# the base and each overlay with `kubectl kustomize`, validates every object it
# renders against the schemas of Kubernetes $K8S_VERSION with kubernetes-validate
# --strict (an unknown or misspelt field fails, not only a wrong type), then checks
# what the deployment needs: the kinds it is made of, the GPU overlay's requests,
# the two daemon configurations alike but for the hbm tier. Last, two negative
# checks show that the checks can fail: a rendered object with a misspelt field
# must be refused, and a render without its HorizontalPodAutoscaler must too.
#
# kubernetes-validate (PyPI, pinned below with its dependencies) lives in a venv
# made once, as tools/pyvenv.sh makes them; later runs need no network.
#   validate-k8s.sh [VENV_DIR]         (VENV_DIR default: build/k8s-venv)
# KUBECTL: the kubectl(s) to render with, space-separated (default: kubectl), e.g.
#   KUBECTL="kubectl /tmp/k120/usr/bin/kubectl" tools/validate-k8s.sh
# to render with kustomize v5 and Debian 12's kubectl 1.20 (kustomize v2.0.3) both.
# Exit status: 0 when everything passed, 1 when anything failed, 2 for usage.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$repo/build/k8s-venv}
KUBECTL=${KUBECTL:-kubectl}
K8S_VERSION=1.29.0
TARGETS="base overlays/cpu overlays/gpu"

say() { echo "validate-k8s: $*"; }
tmp=$(mktemp -d /tmp/hypic-k8s.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

for k in $KUBECTL; do
    if ! command -v "$k" >/dev/null 2>&1; then
        say "no '$k': install kubectl (Debian: kubernetes-client, in deploy/debian-packages.txt; make deps)" >&2
        exit 2
    fi
done

# The validator: exact versions, so that a schema or a rule cannot change under us.
cat >"$tmp/requirements.txt" <<'EOF'
kubernetes-validate==1.32.0
attrs==26.1.0
importlib_resources==7.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
packaging==26.4
PyYAML==6.0.4
referencing==0.37.0
rpds-py==2026.9.1
typing_extensions==4.16.0
EOF
mkdir -p "$(dirname "$venv")"
. "$repo/tools/pyvenv.sh"
hy_pyvenv "$tmp" "$venv" "$tmp/requirements.txt" 10
kv="$(dirname "$VENV_PYTHON")/kubernetes-validate"

# What a rendering must hold, beyond the schema (python: the venv's, with PyYAML).
# checks.py FILE TARGET: exits 1 naming each thing missing.
cat >"$tmp/checks.py" <<'EOF'
import sys, yaml
path, target = sys.argv[1], sys.argv[2]
objs = [o for o in yaml.safe_load_all(open(path)) if o]
have = {(o["kind"], o["metadata"]["name"]) for o in objs}
def by(kind, prefix=""):
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(prefix)]
need = [("StatefulSet", "hypic-cached"), ("StatefulSet", "etcd"), ("Deployment", "hypic-worker"),
        ("HorizontalPodAutoscaler", "hypic-worker"), ("Service", "hypic-cached"),
        ("Service", "hypic"), ("Service", "hypic-worker"), ("Service", "etcd"),
        ("Secret", "hypic-tokens"), ("PodDisruptionBudget", "hypic-cached"),
        ("PodDisruptionBudget", "etcd"), ("NetworkPolicy", "hypic-cached"),
        ("NetworkPolicy", "hypic-worker"), ("NetworkPolicy", "etcd")]
bad = ["missing %s/%s" % k for k in need if k not in have]
if not by("ConfigMap", "hypic-config"):
    bad.append("missing ConfigMap/hypic-config-*")
for name in ("hypic-cached", "hypic-worker", "etcd"):
    for s in [o for o in by("Service") if o["metadata"]["name"] == name]:
        if s["spec"].get("clusterIP") != "None":
            bad.append("Service/%s is not headless (clusterIP: None)" % name)
for c in by("ConfigMap", "hypic-config"):
    for key in ("hypic.yaml", "worker.yaml"):
        if not isinstance(yaml.safe_load(c["data"].get(key, "")), dict):
            bad.append("ConfigMap/%s: no %s" % (c["metadata"]["name"], key))
def limits(kind, name):
    for o in by(kind):
        if o["metadata"]["name"] == name:
            for c in o["spec"]["template"]["spec"]["containers"]:
                if c["name"] == name:
                    return c.get("resources", {}).get("limits", {})
    return {}
gpu = limits("StatefulSet", "hypic-cached").get("nvidia.com/gpu")
if target.endswith("gpu"):
    if str(gpu) != "1":
        bad.append("StatefulSet/hypic-cached asks for %s nvidia.com/gpu, not 1" % (gpu or "no"))
    if not limits("StatefulSet", "hypic-cached").get("rdma/hca_shared_devices_a"):
        bad.append("StatefulSet/hypic-cached asks for no RDMA device")
elif gpu is not None:
    bad.append("StatefulSet/hypic-cached asks for nvidia.com/gpu %s outside overlays/gpu" % gpu)
for b in bad:
    print("  %s: %s" % (target, b))
sys.exit(1 if bad else 0)
EOF

# sameconf.py CPU GPU: the two daemon configurations differ only in tiers.hbm.
cat >"$tmp/sameconf.py" <<'EOF'
import sys, yaml
def conf(path):
    for o in yaml.safe_load_all(open(path)):
        if o and o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("hypic-config"):
            return yaml.safe_load(o["data"]["hypic.yaml"]), yaml.safe_load(o["data"]["worker.yaml"])
cpu, gpu = conf(sys.argv[1]), conf(sys.argv[2])
if not gpu[0]["tiers"]["hbm"].get("bytes"):
    print("  overlays/gpu: hypic.yaml has no tiers.hbm.bytes")
    sys.exit(1)
cpu[0]["tiers"].pop("hbm"); gpu[0]["tiers"].pop("hbm")
if cpu != gpu:
    print("  overlays/gpu/hypic.yaml differs from base/hypic.yaml beyond tiers.hbm")
    sys.exit(1)
EOF

fail=0
n=0
for k in $KUBECTL; do
    n=$((n + 1))
    ver=$("$k" version --client 2>/dev/null | grep -o 'v[0-9][0-9.]*' | head -1 || true)
    for t in $TARGETS; do
        out="$tmp/$n-$(echo "$t" | tr / -).yaml"
        if ! "$k" kustomize "$repo/deploy/k8s/$t" >"$out" 2>"$out.err"; then
            say "FAIL $t: kubectl $ver kustomize:"
            sed 's/^/  /' "$out.err"
            fail=1
            continue
        fi
        objs=$(grep -c '^kind:' "$out" || true)
        if ! "$kv" --strict --quiet -k "$K8S_VERSION" "$out" >"$out.kv" 2>&1; then
            say "FAIL $t (kubectl $ver): $objs objects, not all valid for Kubernetes $K8S_VERSION:"
            sed 's/^/  /' "$out.kv"
            fail=1
        elif ! "$VENV_PYTHON" "$tmp/checks.py" "$out" "$t"; then
            say "FAIL $t (kubectl $ver): valid, but incomplete (above)"
            fail=1
        else
            say "ok   $t (kubectl $ver): $objs objects, valid for Kubernetes $K8S_VERSION (strict)"
        fi
    done
    if [ -s "$tmp/$n-overlays-cpu.yaml" ] && [ -s "$tmp/$n-overlays-gpu.yaml" ]; then
        if "$VENV_PYTHON" "$tmp/sameconf.py" "$tmp/$n-overlays-cpu.yaml" "$tmp/$n-overlays-gpu.yaml"; then
            say "ok   overlays/gpu/hypic.yaml is base/hypic.yaml with tiers.hbm set"
        else
            say "FAIL overlays/gpu/hypic.yaml (above)"
            fail=1
        fi
    fi
done

# Negative checks on the first rendering of overlays/cpu: each must be refused.
cpu="$tmp/1-overlays-cpu.yaml"
if [ -s "$cpu" ]; then
    sed 's/^  podManagementPolicy:/  podManagmentPolicy:/' "$cpu" >"$tmp/neg-field.yaml"
    if "$kv" --strict --quiet -k "$K8S_VERSION" "$tmp/neg-field.yaml" >"$tmp/neg-field.out" 2>&1; then
        say "FAIL negative: a StatefulSet with 'podManagmentPolicy' passed validation"
        fail=1
    elif grep -q "podManagmentPolicy" "$tmp/neg-field.out"; then
        say "ok   negative: a misspelt field (podManagmentPolicy) is refused"
    else
        say "FAIL negative: validation failed, but not on the misspelt field:"
        sed 's/^/  /' "$tmp/neg-field.out"
        fail=1
    fi
    "$VENV_PYTHON" - "$cpu" "$tmp/neg-kind.yaml" <<'EOF'
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] != "HorizontalPodAutoscaler"]
yaml.safe_dump_all(objs, open(sys.argv[2], "w"))
EOF
    if "$VENV_PYTHON" "$tmp/checks.py" "$tmp/neg-kind.yaml" negative >"$tmp/neg-kind.out"; then
        say "FAIL negative: a rendering without its HorizontalPodAutoscaler passed the checks"
        fail=1
    else
        say "ok   negative: a rendering without its HorizontalPodAutoscaler is refused"
    fi
fi

if [ "$fail" -ne 0 ]; then
    say "FAILED"
    exit 1
fi
say "all passed"

#!/bin/sh
# The module layering holds: every probe that includes a header across a
# forbidden arrow fails to compile, and fails because that header cannot be
# found (not for another reason); the allowed probe compiles.
#   check.sh CMAKE BUILD_DIR
set -u
cmake=$1 build=$2
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT INT TERM
pass=0 fail=0
probe() { # name header
    if "$cmake" --build "$build" --target "layering_$1" >"$out" 2>&1; then
        echo "FAIL: layering_$1 compiled: including $2 there must not build"; fail=$((fail + 1))
    elif grep -q "$2: No such file or directory" "$out"; then
        echo "ok:   layering_$1 refused ($2 not on its include path)"; pass=$((pass + 1))
    else
        echo "FAIL: layering_$1 failed for another reason than $2:"; sed 's/^/      /' "$out"
        fail=$((fail + 1))
    fi
}
probe model_includes_tiers hy_tiers.h
probe tiers_includes_model hy_model.h
probe tiers_includes_kernels hy_kernels.h
probe rpc_includes_model hy_model.h
probe rpc_includes_tiers hy_tiers.h
probe rpc_includes_transport hy_transport.h
probe rpc_includes_cluster hy_cluster.h
probe transport_includes_rpc hy_rpc.h
probe transport_includes_cluster hy_cluster.h
probe cluster_includes_transport hy_transport.h
probe cluster_includes_tiers hy_tiers.h
probe client_includes_model hy_model.h
probe client_includes_tiers hy_tiers.h
probe user_includes_model_internal model_internal.h
probe user_includes_tiers_internal store_internal.h
if "$cmake" --build "$build" --target layering_allowed >"$out" 2>&1; then
    echo "ok:   layering_allowed compiled"; pass=$((pass + 1))
else
    echo "FAIL: layering_allowed (the control) did not compile:"; sed 's/^/      /' "$out"
    fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

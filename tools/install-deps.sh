#!/bin/sh
# Installs whichever packages of the given list (one Debian package per line,
# '#' comments allowed) are not installed yet. Used by `make deps`.
# A line may name alternatives, `a|b`: it is satisfied when any of them is
# installed, and installs the first when none is (kubernetes-client|kubectl:
# Debian's own package, or the one of Kubernetes' apt repository, which
# conflict; either gives `kubectl kustomize`).
set -eu
list=${1:-deploy/debian-packages.txt}
installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=""
for line in $(sed -e 's/#.*//' "$list"); do
    found=""
    for p in $(echo "$line" | tr '|' ' '); do
        if installed "$p"; then
            found=$p
            break
        fi
    done
    [ -n "$found" ] || missing="$missing ${line%%|*}"
done
[ -z "$missing" ] && exit 0
echo "installing missing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

#!/bin/sh
# Installs whichever packages of the given list (one Debian package per line,
# '#' comments allowed) are not installed yet. Used by `make deps`.
set -eu
list=${1:-deploy/debian-packages.txt}
missing=""
for p in $(sed -e 's/#.*//' "$list"); do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
echo "installing missing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

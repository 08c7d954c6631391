#!/bin/sh
# Makes sure an `etcd` binary is on PATH for a replicated cluster's private etcd (`make run`, for
# `petrel up --replicas`) and for the tests of one (`make test` runs it first):
# Debian's etcd-server 3.4, installed through apt when it is missing and this runs as root (as CI does).
# The tests start their own members on free ports with their own data dirs, so the package's own service
# is kept from starting (policy-rc.d) and disabled: it would only hold :2379 and /var/lib/etcd.
# It never fails the build: without etcd the tests that need it fail and name the package.
set -u

command -v etcd >/dev/null 2>&1 && exit 0

say() { echo "install_etcd: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
    say "etcd is not installed and apt-get is not available: install etcd 3.4 or later (Debian: etcd-server) yourself;"
    say "the etcd tests fail until then"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    say "etcd is not installed: run \`sudo apt-get install -y etcd-server\` (the etcd tests fail until then)"
    exit 0
fi

# 101: "action forbidden", read by invoke-rc.d and deb-systemd-invoke; only when no policy is in place already
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
fi
say "installing Debian's etcd-server for the etcd tests"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q etcd-server >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q etcd-server >/dev/null; }
status=$?
[ -n "$own_policy" ] && rm -f "$policy"
if [ "$status" -ne 0 ]; then
    say "apt-get could not install etcd-server (status $status): the etcd tests fail until it is installed"
    exit 0
fi
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
say "installed $(etcd --version | head -n 1)"

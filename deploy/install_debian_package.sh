#!/bin/sh
# install_debian_package.sh PACKAGE WHAT [PRESENT_TEST...]
# Makes sure a Debian package the tests need is installed (`make test` runs it for etcd-server, faketime and
# chromium): nothing when PRESENT_TEST (a shell command) succeeds, else apt-get install when this runs as root
# (as CI does), else a message saying what to run. WHAT says what needs the package, in the messages.
# It never fails the build: without the package the tests that need it fail and name it.
# A package whose own service would start on install (etcd-server holds :2379) is kept from starting
# (policy-rc.d, only while none is in place already) and disabled: the tests start their own.
set -u

package=$1
what=$2
shift 2
[ "$#" -gt 0 ] && sh -c "$*" >/dev/null 2>&1 && exit 0

say() { echo "install_debian_package: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
    say "$package is not installed and apt-get is not available: install it (Debian: $package) yourself;"
    say "until then, $what will fail"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    say "$package is not installed: run \`sudo apt-get install -y $package\` (until then, $what will fail)"
    exit 0
fi

# 101: "action forbidden", read by invoke-rc.d and deb-systemd-invoke
policy=/usr/sbin/policy-rc.d
own_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1
fi
say "installing Debian's $package for $what"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "$package" >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q "$package" >/dev/null; }
status=$?
[ -n "$own_policy" ] && rm -f "$policy"
if [ "$status" -ne 0 ]; then
    say "apt-get could not install $package (status $status): until it is, $what will fail"
    exit 0
fi
if [ "$package" = etcd-server ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
say "installed $package"

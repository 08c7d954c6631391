#!/bin/sh
# Makes sure Debian's libfaketime is installed for the nemesis run's wall-clock steps (`make test` runs it first, as
# it runs install_etcd.sh): the package `faketime`, installed through apt when it is missing and this runs as root
# (as CI does). Only the tests and `petrel bench nemesis` use it; no Petrel process needs it.
# It never fails the build: without it the nemesis test fails and names the package.
set -u

ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 && exit 0

say() { echo "install_faketime: $*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
    say "libfaketime is not installed and apt-get is not available: install libfaketime (Debian: faketime) yourself;"
    say "the nemesis test fails until then"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    say "libfaketime is not installed: run \`sudo apt-get install -y faketime\` (the nemesis test fails until then)"
    exit 0
fi
say "installing Debian's faketime for the nemesis run's clock steps"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q faketime >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q faketime >/dev/null; }
status=$?
if [ "$status" -ne 0 ]; then
    say "apt-get could not install faketime (status $status): the nemesis test fails until it is installed"
fi
exit 0

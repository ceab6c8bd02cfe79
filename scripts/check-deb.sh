#!/usr/bin/env bash
# The Debian package, as a person gets it: built with debhelper (`make deb`), checked by lintian (errors fail),
# installed with apt, and the installed programs run: `bgtask status`, `bgtask policy check`, and `bgtaskd` on a
# private session bus answering GetStatus. Then removed again.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
need=()
for p in debhelper dpkg-dev lintian fakeroot; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

rm -rf dist
make deb
deb=$(ls dist/bgtask_*.deb)
echo "built $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb -I "$deb" | sed -n '/Depends/p'

# lintian: errors fail the check; warnings are printed for the record (none at the last look).
lintian --fail-on error "$deb" || { echo "lintian found errors" >&2; exit 1; }

DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "./$deb" >&2
trap 'DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq bgtask >&2 || true' EXIT

test "$(command -v bgtask)" = /usr/bin/bgtask
/usr/bin/bgtask --version
/usr/bin/bgtask status --no-dbus > /dev/null
/usr/bin/bgtask policy check
test -f /usr/share/bgtask/policies/default.toml
man -w bgtask-run > /dev/null

# The installed daemon on a private session bus, with its state in a scratch directory.
tmp=$(mktemp -d)
# A bus of its own configuration: session.conf's standard service directories would hold an installed bgtaskd's
# activation file (~/.local/share/dbus-1/services after the README's first command), which a call could start.
cat > "$tmp/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:dir=$tmp</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>
EOF
bus=$(dbus-daemon --config-file="$tmp/bus.conf" --fork --print-address=1 --print-pid=1)
address=$(echo "$bus" | sed -n 1p)
buspid=$(echo "$bus" | sed -n 2p)
cleanup() {
  kill "$daemon" 2>/dev/null || true
  kill "$buspid" 2>/dev/null || true
  rm -rf "$tmp"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq bgtask >&2 || true
}
trap cleanup EXIT
DBUS_SESSION_BUS_ADDRESS="$address" BGTASK_STATE_DIR="$tmp/state" BGTASK_RUNTIME_DIR="$tmp/run" \
  /usr/bin/bgtaskd --no-dbus 2> "$tmp/bgtaskd.log" &
daemon=$!
DBUS_SESSION_BUS_ADDRESS="$address" timeout 20 gdbus wait --session --timeout 15 io.github.bgtask.Scheduler1
status=$(DBUS_SESSION_BUS_ADDRESS="$address" timeout 10 gdbus call --session -d io.github.bgtask.Scheduler1 \
  -o /io/github/bgtask/Scheduler1 -m io.github.bgtask.Scheduler1.GetStatus)
echo "installed bgtaskd: $status"
echo "$status" | grep -q "'version'"
echo "the package installs and runs"

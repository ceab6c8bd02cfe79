#!/usr/bin/env bash
# A real kernel for bgtask's tests: a systemd-booted Debian 12 guest under qemu — systemd as PID 1, cgroup v2,
# logind, a lingering user's manager and session bus, udev and upowerd, the kernel's test_power charger and
# battery (real uevents), S3 suspend. scripts/check-vm.sh drives it; by hand:
#
#   scripts/vm.sh image               build (or reuse) the disk image            ~2 min, downloads ~330 MB once
#   scripts/vm.sh boot                boot a fresh overlay of it, wait for ssh and the end of boot
#   scripts/vm.sh run [--root] CMD    a shell command in the guest, as the user (a logind session) or root
#   scripts/vm.sh put FILE... DIR     copy files in (as the user; `put --root` as root)
#   scripts/vm.sh power ac|battery|usb  the test_power chargers (real power_supply uevents)
#   scripts/vm.sh monitor CMD         a qemu monitor command (system_wakeup after a guest suspend)
#   scripts/vm.sh halt                power off, bounded; qemu is quit or killed if it does not go
#
# State in $BGTASK_VM_DIR (default .build/vm): disk.img, vmlinuz, initrd.img, the ssh key, image.key (a hash of
# everything the image is made from: unchanged, it is not rebuilt), apt/ (downloaded .debs, reused), run/.
# BGTASK_VM_ACCEL=kvm|tcg|auto (auto: kvm where /dev/kvm can run Debian's kernel — not on a kvm_pvm host,
# where it hangs at boot — else qemu's TCG emulator: the same kernel, slower). Runs as root (mmdebstrap).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
vm=${BGTASK_VM_DIR:-$here/../.build/vm}
mkdir -p "$vm/run"
vm=$(cd "$vm" && pwd)
guest_user=tester
key="$vm/id_ed25519"

die() { echo "vm: $*" >&2; exit 1; }

# ConnectTimeout covers sshd's banner too: a busy guest under TCG may take longer than 5 s to send it.
ssh_opts() {
  local connect=5
  [[ "$(cat "$vm/run/accel" 2>/dev/null)" == tcg ]] && connect=15
  echo -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes \
       -o ConnectTimeout=$connect -o ServerAliveInterval=5 -o ServerAliveCountMax=6
}

mirror() {
  local m=${BGTASK_VM_MIRROR:-}
  [[ -n "$m" ]] || m=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n "$m" ]] || m=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
  [[ -n "$m" ]] || die "no Debian mirror in this machine's apt sources; set BGTASK_VM_MIRROR"
  echo "$m"
}

# What the guest has: the boot and session stack, upowerd, bgtask's runtime libraries (so the .deb installs
# without a network), tools the checks use, and what builds test_power (Debian's kernel leaves it out).
packages=(systemd systemd-sysv dbus dbus-user-session libpam-systemd udev upower polkitd linux-image-amd64
          initramfs-tools kmod openssh-server sudo procps psmisc python3 python3-gi gir1.2-glib-2.0 libglib2.0-bin
          libudev1 libupower-glib3 libglib2.0-0 libsqlite3-0 libgcc-s1 libstdc++6 zlib1g man-db
          linux-headers-amd64 linux-source gcc make xz-utils)

cmd_image() {
  local m include k start
  m=$(mirror)
  include=$(printf '%s\n' "${packages[@]}" | sort -u | paste -sd, -)
  k=$( { echo "$include"; echo "$m"; cat "$0" "$here/vm-customize.sh"; } | sha256sum | cut -c1-16)
  if [[ -f "$vm/disk.img" && "$(cat "$vm/image.key" 2>/dev/null)" == "$k" ]]; then echo "vm: image $k is up to date"; return; fi
  [[ -f "$key" ]] || ssh-keygen -q -t ed25519 -N '' -C bgtask-vm -f "$key"
  mkdir -p "$vm/apt"
  rm -rf "$vm/root" "$vm/disk.img" "$vm/image.key"
  start=$SECONDS
  mmdebstrap --mode=root --variant=apt --include="$include" --skip=download/empty \
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
    --setup-hook="sync-in $vm/apt /var/cache/apt/archives" \
    --customize-hook="sync-out /var/cache/apt/archives $vm/apt" \
    --customize-hook="$here/vm-customize.sh \"\$1\" $guest_user $key.pub $vm" \
    bookworm "$vm/root" "$m"
  mke2fs -q -t ext4 -L bgtask-vm -d "$vm/root" "$vm/disk.img" 5G
  rm -rf "$vm/root"
  echo "$k" > "$vm/image.key"
  echo "vm: image $k built in $(( SECONDS - start )) s"
}

cmd_boot() {
  local accel args port deadline
  [[ -f "$vm/disk.img" ]] || die "no image: scripts/vm.sh image"
  if [[ -f "$vm/run/qemu.pid" ]] && kill -0 "$(cat "$vm/run/qemu.pid")" 2>/dev/null; then die "a guest already runs (pid $(cat "$vm/run/qemu.pid"))"; fi
  accel=${BGTASK_VM_ACCEL:-auto}
  if [[ $accel == auto ]]; then
    if [[ -w /dev/kvm && ! -d /sys/module/kvm_pvm ]]; then accel=kvm; else accel=tcg; fi
  fi
  case $accel in
    kvm) args=(-machine q35,accel=kvm -cpu host,-arch-capabilities) ;;
    tcg) args=(-machine q35 -accel tcg,thread=multi -cpu max) ;;
    *) die "BGTASK_VM_ACCEL is kvm, tcg or auto" ;;
  esac
  rm -f "$vm/run/"*
  echo "$accel" > "$vm/run/accel"
  qemu-img create -q -f qcow2 -F raw -b "$vm/disk.img" "$vm/run/overlay.qcow2"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "$port" > "$vm/run/port"
  qemu-system-x86_64 -name bgtask-vm "${args[@]}" -m 2G -smp 2 -kernel "$vm/vmlinuz" -initrd "$vm/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 mem_sleep_default=deep" \
    -drive "file=$vm/run/overlay.qcow2,format=qcow2,if=virtio" \
    -nic "user,model=virtio-net-pci,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22" \
    -display none -serial "file:$vm/run/console.log" -monitor "unix:$vm/run/monitor.sock,server,nowait" \
    -pidfile "$vm/run/qemu.pid" -daemonize
  deadline=$(( SECONDS + ${BGTASK_VM_BOOT_TIMEOUT:-300} ))
  until cmd_run --root --timeout 10 true 2>/dev/null; do
    (( SECONDS < deadline )) || die "no ssh after ${BGTASK_VM_BOOT_TIMEOUT:-300} s ($accel); see $vm/run/console.log"
    kill -0 "$(cat "$vm/run/qemu.pid")" 2>/dev/null || die "qemu exited; see $vm/run/console.log"
    sleep 1
  done
  echo "vm: ($accel) ssh after $SECONDS s; $(cmd_run --root --timeout $(( deadline - SECONDS + 5 )) 'systemctl is-system-running --wait' || true) after $SECONDS s"
}

cmd_run() {
  local who=$guest_user limit=600
  while [[ $# -gt 0 ]]; do
    case $1 in --root) who=root; shift ;; --timeout) limit=$2; shift 2 ;; *) break ;; esac
  done
  # shellcheck disable=SC2046
  timeout "$limit" ssh $(ssh_opts) -p "$(cat "$vm/run/port")" "$who@127.0.0.1" "$@"
}

cmd_put() {
  local who=$guest_user
  [[ ${1:-} == --root ]] && { who=root; shift; }
  local dest=${*: -1}
  # shellcheck disable=SC2046
  timeout 300 scp -q $(ssh_opts) -P "$(cat "$vm/run/port")" "${@:1:$#-1}" "$who@127.0.0.1:$dest"
}

cmd_power() {
  local set
  case ${1:-} in
    ac) set="echo off > usb_online; echo on > ac_online; echo charging > battery_status" ;;
    battery) set="echo off > usb_online; echo off > ac_online; echo discharging > battery_status" ;;
    usb) set="echo on > usb_online; echo off > ac_online; echo charging > battery_status" ;;
    *) die "power ac|battery|usb" ;;
  esac
  cmd_run --root --timeout 30 "[ -d /sys/module/test_power ] || modprobe test_power; cd /sys/module/test_power/parameters && $set"
}

cmd_monitor() {
  python3 - "$vm/run/monitor.sock" "$*" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])
time.sleep(0.2); s.recv(65536)
s.sendall((sys.argv[2] + "\n").encode()); time.sleep(0.3)
try: print(s.recv(65536).decode(errors="replace").split("\n", 1)[-1].strip())
except socket.timeout: pass
PY
}

cmd_halt() {
  local pid
  [[ -f "$vm/run/qemu.pid" ]] || return 0
  pid=$(cat "$vm/run/qemu.pid")
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == qemu-system-* ]] || { rm -f "$vm/run/qemu.pid"; return 0; }
  cmd_run --root --timeout 15 'systemctl poweroff --no-block' >/dev/null 2>&1 || true
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || break
    # After an S3 resume the ACPI power-off may not end qemu: once the guest has powered down, quit it.
    grep -q "reboot: Power down" "$vm/run/console.log" 2>/dev/null && cmd_monitor quit >/dev/null 2>&1
    sleep 1
  done
  kill -0 "$pid" 2>/dev/null && { kill "$pid"; sleep 2; kill -9 "$pid" 2>/dev/null; }
  rm -f "$vm/run/qemu.pid"
}

sub=${1:?usage: scripts/vm.sh image|boot|run|put|power|monitor|halt ...}; shift
case $sub in
  image|boot|run|put|power|monitor|halt) "cmd_$sub" "$@" ;;
  *) die "unknown command $sub" ;;
esac

#!/usr/bin/env bash
# Installs the Debian 12 packages bgtask builds against; with --test, also what its tests run (--bench: and the
# benchmarks' peers):
# umockdev (fake sysfs + uevents), the real upowerd, dbus-daemon, gdbus, python3-dbusmock, bubblewrap (a
# Flatpak-shaped sandbox for the caller checks), tmux (completion in a real terminal), prometheus (promtool),
# chromium (bgtask report rendered headless), faketime (a clock on a daylight-saving day),
# and systemd (a user
# manager of the test's own, in a mount namespace made by util-linux's unshare).
set -euo pipefail
pkgs=(pkg-config libudev-dev libupower-glib-dev libglib2.0-dev libsqlite3-dev libsystemd-dev make binutils python3)
if [[ "${1:-}" == "--test" || "${1:-}" == "--bench" ]]; then
  pkgs+=(umockdev libumockdev-dev gir1.2-umockdev-1.0 upower dbus libglib2.0-bin python3-dbusmock python3-gi
         make binutils file man-db groff-base bash bash-completion tmux zsh fish systemd util-linux mount bubblewrap prometheus chromium faketime)
fi
# --bench: also the peers the benchmarks measure beside bgtask (`at`, for `bgtask submit`).
[[ "${1:-}" == "--bench" ]] && pkgs+=(at)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  # Only its promtool is wanted (bgtask metrics' check): the server the package starts is stopped again.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
    $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

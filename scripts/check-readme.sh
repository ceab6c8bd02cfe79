#!/usr/bin/env bash
# The README's two set-up commands, taken from the README itself and run in that order in a fresh HOME, as a new
# user runs them: the first installs bgtask (and its D-Bus activation file) in ~/.local, the second runs the whole
# test suite. Then it checks that the suite was hermetic:
# - nothing it started is left running (a test bus that read the standard session service directories would have
#   activated the installed bgtaskd, which outlives the suite);
# - it wrote nothing in HOME (beyond the build tools' own caches) nor in the user's and root's bgtask state and
#   configuration directories.
# Extra arguments go to the test command (CI passes none).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "check-readme: $*" >&2; exit 1; }

# The first ```sh block of the README: its two command lines, comments left out.
mapfile -t commands < <(awk '/^```sh$/ { inside = 1; next } inside && /^```$/ { exit } inside && !/^#/ && NF' README.md)
[[ ${#commands[@]} -eq 2 ]] || fail "the README's first sh block should hold exactly two commands, it holds ${#commands[@]}: ${commands[*]}"

home=$(mktemp -d /tmp/bgtask-readme-home.XXXXXX)
trap 'rm -rf "$home"' EXIT
# Where a leaked daemon or test would write: the fresh user's own directories and root's system-wide state.
watched=("$home/.local/state/bgtask" "$home/.config/bgtask" "$home/.local/share/bgtask" /var/lib/bgtask /etc/bgtask)
snapshot() {
  for d in "${watched[@]}"; do
    if [[ -e $d ]]; then find "$d" -printf '%p %s %T@\n' 2>/dev/null || true; fi
  done | sort
}
# Every process the suite started carries this in its environment (dbus-daemon hands its own to what it activates,
# the namespaced user manager is given the suite's): what still has it afterwards was left running.
mark="BGTASK_README_CHECK=$$.$RANDOM$RANDOM"
marked() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if { tr '\0' '\n' < "$f"; } 2>/dev/null | grep -qxF "$mark"; then echo "$pid $(ps -o args= -p "$pid" 2>/dev/null)"; fi
  done
}

echo "check-readme: 1/2: ${commands[0]}"
HOME="$home" bash -euo pipefail -c "${commands[0]}"

before_state=$(snapshot)
marker="$home/.before-tests"
touch "$marker"
echo "check-readme: 2/2: ${commands[1]} $*"
HOME="$home" env "$mark" bash -euo pipefail -c "${commands[1]} \"\$@\"" check-readme "$@"

# Left running: processes of the suite's. One the suite just stopped may take a moment to be reaped by its parent;
# wait (bounded) for it to go before calling it leaked.
left=""
for _ in $(seq 1 40); do
  left=$(marked)
  [[ -z $left ]] && break
  sleep 0.5
done
[[ -z $left ]] || fail "the test suite left these running:
$left"

[[ "$(snapshot)" == "$before_state" ]] || fail "the test suite changed bgtask's real state or configuration:
$(diff <(echo "$before_state") <(snapshot) || true)"

# HOME: only the build tools' caches may change (the test command builds before it tests).
written=$(find "$home" -newer "$marker" -not -path "$home/.cache/*" -not -path "$home/.swiftpm/*" \
          -not -path "$home/.cache" -not -path "$home/.swiftpm" -not -path "$home" -print)
[[ -z $written ]] || fail "the test suite wrote in HOME:
$written"
echo "check-readme: the README's commands pass in order; the suite left nothing running and wrote nothing outside temp directories"

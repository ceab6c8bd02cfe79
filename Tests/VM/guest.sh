#!/bin/sh
# Guest-side steps of scripts/check-vm.sh, run in the Debian guest as its user:  sh guest.sh STEP
# Each step exits 0 when what it checks holds; what it prints is shown when it does not.
set -u
step=$1

case $step in
  unit-running)   # unit-running ID: a transient unit of bgtaskd runs for task ID, in background.slice
    u=$(systemctl --user list-units --no-legend --plain "bgtask-$2-*" | awk '$4 == "running" {print $1; exit}')
    [ -n "$u" ] && systemctl --user show -p Slice --value "$u" | grep -qx background.slice ;;
  locks)          # both delay locks of bgtaskd are held
    l=$(systemd-inhibit --list --no-pager --mode=delay)
    echo "$l"
    echo "$l" | grep bgtaskd | grep -qw sleep && echo "$l" | grep bgtaskd | grep -qw shutdown ;;
  feed)           # a refresh task whose SIGTERM handler takes 1 s and notes when it finished (the policy gives refresh
    # work 2 s on the way to sleep). Builtins only, no fork once it runs: under emulation on a slow host a fork of
    # sleep and of date once took the handler past the grace. Its mark's mtime is when it finished.
    rm -f /tmp/handled
    bgtask submit --id feed --kind refresh -- bash -c 'exec 3<> <(:); trap "read -t 1 -u 3; echo > /tmp/handled; exit 0" TERM; while :; do read -t 1 -u 3; done' ;;
  handled-before-suspend)
    # No mark: what bgtaskd said of the task (did it run, was it told to stop, was it killed) is the failure's text.
    h=$(stat -c %.9Y /tmp/handled) || { journalctl --user -u bgtaskd -o short-unix --no-pager | grep -e feed -e sleep | tail -n 12; exit 1; }
    s=$(sudo journalctl -k -o short-unix --no-pager -g "PM: suspend entry" | tail -n 1 | cut -d" " -f1)
    echo "handler done at $h, suspend entry at $s"
    [ -n "$s" ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$h" "$s" ;;
  share)          # share ID: percent of a CPU task ID's unit used over 10 s (the unit waited for, 60 s at most)
    end=$(( $(date +%s) + 60 ))   # by the clock: under emulation one systemctl call may take a second
    while :; do
      u=$(systemctl --user list-units --no-legend --plain "bgtask-$2-*" | awk '{print $1; exit}')
      [ -n "$u" ] || [ "$(date +%s)" -ge "$end" ] && break
      sleep 0.2
    done
    [ -n "$u" ] || { echo "no unit of task $2" >&2; exit 1; }
    a=$(systemctl --user show -p CPUUsageNSec --value "$u"); sleep 10
    b=$(systemctl --user show -p CPUUsageNSec --value "$u")
    echo $(( (b - a) / 100000000 )) ;;
  shares)         # shares ID: percent of a CPU used over the same 10 s by task ID's unit, hog1 and hog2
    u=$(systemctl --user list-units --no-legend --plain "bgtask-$2-*" | awk '{print $1; exit}')
    a=$(echo $(systemctl --user show -p CPUUsageNSec --value "$u" hog1 hog2)); sleep 10
    b=$(echo $(systemctl --user show -p CPUUsageNSec --value "$u" hog1 hog2))
    echo $(echo "$a $b" | awk '{printf "%d %d %d", ($4 - $1) / 1e8, ($5 - $2) / 1e8, ($6 - $3) / 1e8}') ;;
  hogs)           # hogs start|stop: two CPU hogs of the user's in app.slice; start returns once both run
    for n in 1 2; do
      if [ "$2" = start ]; then systemd-run --user --quiet --slice=app.slice --unit="hog$n" sh -c 'while :; do :; done'
      else systemctl --user stop "hog$n"; fi
    done
    if [ "$2" = start ]; then
      for i in $(seq 50); do
        [ "$(echo $(systemctl --user show -p ActiveState --value hog1 hog2))" = "active active" ] && exit 0
        sleep 0.2
      done
      systemctl --user status --no-pager hog1 hog2; exit 1
    fi ;;
  weights)        # what decides the share: background.slice's weight and cgroup cpu.idle, app.slice's weight
    c=$(systemctl --user show -p ControlGroup --value background.slice)
    echo "background.slice $(systemctl --user show -p CPUWeight background.slice) cpu.idle=$(cat /sys/fs/cgroup$c/cpu.idle 2>&1)" \
      "app.slice $(systemctl --user show -p CPUWeight app.slice)" ;;
  gate-layer)     # a policy layer in directories that did not exist when bgtaskd started
    mkdir -p ~/.config/bgtask/policy.d
    printf '[[rule]]\nid = "vm.gate"\nwhen = '"'"'task.id == "gated"'"'"'\nverdict = "defer"\nreason = "held by the new layer"\n' \
      > ~/.config/bgtask/policy.d/50-gate.toml ;;
  gated)
    bgtask submit --id gated -- true > /dev/null && bgtask pending --json | grep -q "held by the new layer" ;;
  late-manifest)
    mkdir -p ~/.local/share/bgtask/apps
    printf 'id = "org.example.Late"\ncommand = ["/bin/true"]\npermitted_identifiers = ["org.example.late.refresh"]\n' \
      > ~/.local/share/bgtask/apps/org.example.Late.toml ;;
  crashy)
    rm -f /tmp/crashy
    bgtask submit --id crashy -- sh -c 'echo $$ >> /tmp/crashy; echo from-the-task; exec sleep 600' ;;
  crashy-once)    # recovered after bgtaskd's SIGKILL, and never two copies alive
    journalctl --user -u bgtaskd -o cat | grep -q "crashy: interrupted" || exit 1
    n=0
    for p in $(cat /tmp/crashy); do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
    echo "$n copies alive of $(wc -l < /tmp/crashy) started"
    [ "$n" -le 1 ] ;;
  colorfeed)      # the ported sample installed as a user installs an app: its program and its manifest
    mkdir -p ~/bin ~/.local/share/bgtask/apps && install -m 755 /tmp/ColorFeed ~/bin/ColorFeed
    sed "s|@BINDIR@|$HOME/bin|" /tmp/com.example.apple-samplecode.ColorFeed.toml \
      > ~/.local/share/bgtask/apps/com.example.apple-samplecode.ColorFeed.toml ;;
  cleaned)        # the database cleaning ran in a launch of bgtaskd's: the feed file says when. Read, not asked of
    # `ColorFeed status`: that registers the handlers too, and a task delivered to it would die with it.
    grep -q lastCleaned ~/.local/share/ColorFeed/feed.json \
      && bgtask output app:com.example.apple-samplecode.ColorFeed | grep -q "ColorFeed: cleaned: removed" ;;
  pause-layer)    # a rule that pauses task "frozen" on battery
    mkdir -p ~/.config/bgtask/policy.d
    printf '[[rule]]\nid = "vm.pause"\nwhen = '"'"'task.id == "frozen" && power.external != true'"'"'\nverdict = "pause"\nreason = "paused on battery"\n' \
      > ~/.config/bgtask/policy.d/60-pause.toml ;;
  freezer)        # freezer ID running|frozen: the cgroup v2 freezer state of task ID's unit, as systemd reports it
    u=$(systemctl --user list-units --no-legend --plain "bgtask-$2-*" | awk '{print $1; exit}')
    [ -n "$u" ] && systemctl --user show -p FreezerState --value "$u" | tee /dev/stderr | grep -qx "$3" ;;
  *) echo "guest.sh: unknown step $step" >&2; exit 2 ;;
esac

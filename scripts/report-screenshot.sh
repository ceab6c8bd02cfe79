#!/usr/bin/env bash
# docs/report.png: `bgtask policy simulate --html` of the recorded trace in Tests/BgtaskPolicyTests/Traces
# (a charger unplugged, heat, the charger back), rendered by headless Chromium. Run after `swift build`.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.build/debug/bgtask policy simulate --trace Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl \
  --requires-external-power --cpu-heavy --id backup --html "$tmp/report.html" >/dev/null
HOME="$tmp" timeout 90 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,420 \
  --user-data-dir="$tmp/profile" --screenshot="$tmp/report.png" "file://$tmp/report.html" >/dev/null 2>&1
cp "$tmp/report.png" docs/report.png
echo "docs/report.png: $(python3 scripts/png-stats.py docs/report.png | head -1)"

#!/usr/bin/env bash
# Runs the benchmarks under umockdev's preload against the release build the README installs (static Swift
# runtime) and prints one table: a row per measurement, bgtask beside its peer measured in the same run, their
# ratio and the goal. A full run (no arguments) also writes that table into docs/benchmarks.md, between its
# bench:begin and bench:end markers, with the machine and the commit; `--only 5,9` runs some sections and only
# prints.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench
make all
# The command the reaction rows wait to start: plain C from the system compiler, as a command is. Built by
# SwiftPM it loaded Swift's runtime first (2.4 ms from spawn to its first instruction here, against 0.9 ms).
mkdir -p .build/release
cc -O2 -o .build/release/bgtask-stamp Benchmarks/bgtask-stamp.c
swift build $(make -s --no-print-directory swiftflags) --product bgtask-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
BGTASK_BIN=.build/release/bgtask umockdev-wrapper .build/release/bgtask-bench "$@" | tee "$out"
if [[ $# -eq 0 ]]; then
  about="Measured $(date -u +%Y-%m-%d) by \`scripts/bench.sh\` at $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)'):"
  about+=" $(nproc) cores, $(uname -r), $(swift --version 2>/dev/null | head -n 1 | sed 's/ (.*//')."
  python3 - "$out" "$about" <<'PY'
import sys
table = open(sys.argv[1]).read().strip()
doc_path = "docs/benchmarks.md"
doc = open(doc_path).read()
begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
head, rest = doc.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc_path, "w").write(head + begin + "\n" + sys.argv[2] + "\n\n" + table + "\n" + end + tail)
print("docs/benchmarks.md: the table written", file=sys.stderr)
PY
fi

#!/usr/bin/env bash
# Runs the benchmarks under umockdev's preload against the release build the README installs
# (static Swift runtime); prints the table for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
make all
# The command the reaction rows wait to start: plain C from the system compiler, as a command is. Built by
# SwiftPM it loaded Swift's runtime first (2.4 ms from spawn to its first instruction here, against 0.9 ms).
mkdir -p .build/release
cc -O2 -o .build/release/bgtask-stamp Benchmarks/bgtask-stamp.c
swift build $(make -s --no-print-directory swiftflags) --product bgtask-bench
BGTASK_BIN=.build/release/bgtask umockdev-wrapper .build/release/bgtask-bench "$@"

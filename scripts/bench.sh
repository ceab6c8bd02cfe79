#!/usr/bin/env bash
# Runs the benchmarks (release build) under umockdev's preload; prints the table for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
swift build -c release --product bgtask
swift build -c release --product bgtask-bench
BGTASK_BIN=.build/release/bgtask umockdev-wrapper .build/release/bgtask-bench "$@"

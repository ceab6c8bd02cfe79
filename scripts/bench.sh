#!/usr/bin/env bash
# Runs the benchmarks under umockdev's preload against the release build the README installs
# (static Swift runtime); prints the table for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
swift build -c release --static-swift-stdlib --product bgtask
swift build -c release --static-swift-stdlib --product bgtaskd
swift build -c release --product bgtask-stamp
swift build -c release --static-swift-stdlib --product bgtask-bench
BGTASK_BIN=.build/release/bgtask umockdev-wrapper .build/release/bgtask-bench "$@"

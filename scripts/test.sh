#!/usr/bin/env bash
# The whole test suite: unit tests on recorded hardware, and integration tests under umockdev's
# preload against the real upowerd on a private bus. With CI set, a missing preload fails the
# integration tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
swift build --build-tests
umockdev-wrapper swift test --skip-build "$@"

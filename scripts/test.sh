#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): setup (idempotent), format and lint
# checks, then every test. Everything builds in the release profile so torch-sys compiles once.
# Tests that need a GPU print a SKIP line on machines without one; scripts/gpu-check.sh runs
# them on the GPU host.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
scripts/setup.sh --no-build
cargo fmt --check
cargo clippy --release --all-targets --quiet -- -D warnings
cargo test --release --no-fail-fast
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP (no GPU): GPU verdicts, timing and profiles are not checked here; run scripts/gpu-check.sh on a GPU host"
fi

#!/usr/bin/env bash
# Every GPU check of a session, on the GPU host. Builds nothing: expects the release binary
# (built on the build host) at target/release/kforge. Logs go to $OUT (default ./gpu-check-out);
# a short table is printed last.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
out=${OUT:-$repo/gpu-check-out}
mkdir -p "$out"
torch_lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KFORGE_HOME=${KFORGE_HOME:-/tmp/kforge-home}
bin=$repo/target/release/kforge
declare -a rows

check() { # name, command...
  local name=$1; shift
  local start end rc
  start=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1; rc=$?
  end=$(date +%s.%N)
  rows+=("$(printf '%-28s rc=%-3s %6.1fs' "$name" "$rc" "$(echo "$end - $start" | bc)")")
  return $rc
}

check doctor "$bin" doctor --need profile
check doctor-json "$bin" doctor --json --need profile
cat "$out/doctor.log"

echo
echo "== gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
printf '%s\n' "${rows[@]}"

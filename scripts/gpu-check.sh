#!/usr/bin/env bash
# Every GPU check of a session, on the GPU host. Builds nothing: expects the release binary built
# on the build host at target/release/kforge (carry it). Logs go to $OUT (default
# ./gpu-check-out); a short table is printed last.
#
#   scripts/gpu-check.sh [doctor] [import] [catalog] [speed] [repro] [export] [evalprofile] [run] [resume] [profile]
# With no arguments everything runs.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# $OUT returns only a few files: logs are written to a work folder and packed at the end.
final=${OUT:-$repo/gpu-check-out}
out=$(mktemp -d /tmp/gpu-check.XXXXXX)
mkdir -p "$final"
torch_lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KFORGE_HOME=${KFORGE_HOME:-/tmp/kforge-home}
export PYTHONUNBUFFERED=1
bin=$repo/target/release/kforge
bundles=$KFORGE_HOME/bundles
steps=${*:-doctor import catalog speed repro export evalprofile run resume profile}
rows=()
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.2f}')"; }
row() { rows+=("$(printf '%-34s %-14s %s' "$1" "$2" "$3")"); }
has() { [[ " $steps " == *" $1 "* ]]; }

if has doctor; then
  "$bin" doctor --need profile >"$out/doctor.txt" 2>&1; rc=$?
  cat "$out/doctor.txt"
  row "doctor --need profile" "rc=$rc" ""
fi

if has import; then
  t0=$(now)
  # PROBLEMS narrows the import to some files (a quick check); all of ours by default.
  # shellcheck disable=SC2086
  "$bin" import ${PROBLEMS:-kernelbench/problems} --out "$bundles" >"$out/import.txt" 2>&1; rc=$?
  t1=$(now)
  row "import ${PROBLEMS:-kernelbench/problems}" "rc=$rc" "$(elapsed "$t0" "$t1") s"
  # The catalog's problem with a size not divisible by the block (for the off-by-one tail).
  "$bin" import kernelbench/problems/gelu_activation.py --size batch_size=3 --size dim=333337 --out "$bundles/odd" \
    >>"$out/import.txt" 2>&1 || row "import gelu (odd size)" "FAILED" "see import.txt"
  tail -n 30 "$out/import.txt"
fi

# catalog.tsv: candidate, bundle, expected status.
if has catalog; then
  : >"$out/catalog.txt"
  while IFS=$'\t' read -r cand bundle expected; do
    [[ -z "$cand" || "$cand" == \#* ]] && continue
    # CANDIDATES (a regex) narrows the catalog for a quick re-check.
    [[ -n "${CANDIDATES:-}" && ! "$cand" =~ ${CANDIDATES} ]] && continue
    if [ ! -f "$bundles/$bundle/problem.json" ]; then row "$cand" "skipped" "no bundle $bundle"; continue; fi
    t0=$(now)
    "$bin" eval "$bundles/$bundle" "tests/fixtures/candidates/$cand" --stage-timeout 10 --json --output "$out/eval-${cand%.cu}.json" \
      >/dev/null 2>>"$out/catalog.txt"
    t1=$(now)
    got=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['status'], '|', d['summary'][:90])" "$out/eval-${cand%.cu}.json" 2>/dev/null || echo "no-result |")
    status=${got%% |*}
    verdict=$([ "$status" = "$expected" ] && echo ok || echo WRONG)
    echo "$cand $bundle expected=$expected got=$got ($(elapsed "$t0" "$t1") s)" >>"$out/catalog.txt"
    row "$cand" "$verdict" "$status (want $expected) $(elapsed "$t0" "$t1")s ${got#*| }"
    printf '%s\n' "${rows[-1]}" >>"$final/summary.txt"
  done <tests/fixtures/candidates/catalog.tsv
fi

# Wall time of kforge eval per correct candidate with a cold compile cache (median of 3).
if has speed; then
  while IFS=$'\t' read -r cand bundle expected; do
    [[ "$expected" != correct || ! -f "$bundles/$bundle/problem.json" ]] && continue
    times=()
    for i in 1 2 3; do
      rm -rf "$KFORGE_HOME/compile-cache"
      t0=$(now); "$bin" eval "$bundles/$bundle" "tests/fixtures/candidates/$cand" >"$out/speed-${cand%.cu}-$i.txt" 2>&1; t1=$(now)
      times+=("$(elapsed "$t0" "$t1")")
    done
    med=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
    row "eval wall $cand" "${med}s" "runs: ${times[*]}"
  done <tests/fixtures/candidates/catalog.tsv
fi

# Reproducibility: one candidate in 5 separate processes, spread of the medians.
if has repro; then
  for i in 1 2 3 4 5; do
    "$bin" eval "$bundles/${REPRO_BUNDLE:-gelu_activation}" tests/fixtures/candidates/gelu_correct.cu --json --output "$out/repro-$i.json" >/dev/null 2>&1
  done
  spread=$(python3 - "$out" <<'PY'
import json, sys, glob
m = [json.load(open(f))["timing"]["candidate"]["median"] for f in sorted(glob.glob(sys.argv[1] + "/repro-*.json"))]
print(f"medians(ms)={' '.join(f'{x:.4f}' for x in m)} spread={(max(m)-min(m))/min(m)*100:.2f}%")
PY
)
  row "repro gelu_correct x5" "" "$spread"
fi

if has export; then
  "$bin" export "$bundles/${REPRO_BUNDLE:-gelu_activation}" tests/fixtures/candidates/gelu_correct.cu --kernelbench "$out/gelu_model_new.py" >"$out/export.txt" 2>&1
  python3 scripts/check_export.py "$out/gelu_model_new.py" >>"$out/export.txt" 2>&1; rc=$?
  row "export ModelNew under PyTorch" "rc=$rc" "$(tail -n 1 "$out/export.txt")"
fi

# eval --profile: the Judge's ncu view attached to a correct candidate's result document.
if has evalprofile; then
  "$bin" eval "$bundles/${REPRO_BUNDLE:-gelu_activation}" tests/fixtures/candidates/gelu_correct.cu --profile --json --output "$out/eval-profile.json" \
    >"$out/eval-profile.txt" 2>&1; rc=$?
  got=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); n=d.get('ncu') or {}; print(d['status'], '|', (n.get('judge_view') or 'not profiled: %s' % n.get('reason'))[:80].replace(chr(10),' '))" "$out/eval-profile.json" 2>/dev/null || echo "no-result |")
  row "eval --profile gelu_correct" "rc=$rc" "$got"
fi

# A real tuning session: the scripted demo on the full-size problem through compile, verify,
# time and profile (kforge demo imports softmax_rows with baselines first).
if has run; then
  t0=$(now)
  "$bin" demo --runs "$out/runs" >"$out/run.txt" 2>&1; rc=$?
  t1=$(now)
  tail -n 16 "$out/run.txt"
  rundir=$(ls -d "$out"/runs/*/ 2>/dev/null | head -1)
  if [ -n "$rundir" ]; then
    python3 scripts/check_run.py "$rundir" >"$out/run-check.txt" 2>&1; crc=$?
    cat "$out/run-check.txt"
    row "demo run (scripted, GPU)" "rc=$rc check=$crc" "$(elapsed "$t0" "$t1") s $(grep -m1 '^best' "$out/run.txt" | cut -c13-90)"
  else
    row "demo run (scripted, GPU)" "rc=$rc" "no run directory; see run.txt"
  fi
fi

# Kill a run mid-way (SIGKILL, as a crash would) and resume it: it must end whole and checked.
# Uses the bundle the run step imported.
if has resume; then
  bundle_dir="$KFORGE_HOME/bundles/demo/softmax_rows"
  "$bin" run "$bundle_dir" --scripted demo/softmax_rows --max-nodes 8 --parallel 2 \
    --runs "$out/resume-runs" --name killed --lines >"$out/resume-1.txt" 2>&1 &
  pid=$!
  sleep "${KILL_AFTER:-20}"
  kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  before=$(grep -c '^node ' "$out/resume-1.txt")
  t0=$(now)
  "$bin" run --resume "$out/resume-runs/killed" --lines >"$out/resume-2.txt" 2>&1; rc=$?
  t1=$(now)
  python3 scripts/check_run.py "$out/resume-runs/killed" >"$out/resume-check.txt" 2>&1; crc=$?
  tail -n 12 "$out/resume-2.txt"
  row "killed after ${KILL_AFTER:-20}s ($before nodes), resumed" "rc=$rc check=$crc" "$(elapsed "$t0" "$t1") s $(grep -m1 '^nodes' "$out/resume-2.txt" | cut -c13-70)"
fi

# Profiles: every correct candidate of the catalog and every bundled reference.
if has profile; then
  mkdir -p "$out/profiles"
  while IFS=$'\t' read -r cand bundle expected; do
    [[ "$expected" != correct || ! -f "$bundles/$bundle/problem.json" ]] && continue
    t0=$(now)
    "$bin" profile "$bundles/$bundle" "tests/fixtures/candidates/$cand" --report "$out/profiles/${bundle//\//_}-${cand%.cu}" \
      >"$out/profiles/${bundle//\//_}-${cand%.cu}.txt" 2>&1; rc=$?
    t1=$(now)
    row "profile $cand" "rc=$rc" "$(elapsed "$t0" "$t1")s $(grep -m1 -i 'bound' "$out/profiles/${bundle//\//_}-${cand%.cu}.txt" | cut -c1-70)"
  done <tests/fixtures/candidates/catalog.tsv
  for dir in "$bundles"/*/; do
    name=$(basename "$dir")
    [ -f "$dir/problem.json" ] || continue
    t0=$(now)
    "$bin" profile "$dir" --reference --report "$out/profiles/$name-reference" >"$out/profiles/$name-reference.txt" 2>&1; rc=$?
    t1=$(now)
    row "profile reference $name" "rc=$rc" "$(elapsed "$t0" "$t1")s"
  done
  first=$(ls "$out"/profiles/*-gelu_correct.txt 2>/dev/null | head -1)
  [ -n "$first" ] && { echo "== Judge view of $(basename "$first" .txt)"; cat "$first"; }
fi

echo
echo "== gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), commit ${KFORGE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)})"
printf '%s\n' "${rows[@]}" | tee "$out/summary.txt"
cp "$out/summary.txt" "$final/summary.txt"
tar -czf "$final/logs.tar.gz" --exclude='*.ncu-rep' -C "$out" .

#!/usr/bin/env python3
"""Checks a finished `kforge run` directory (used by scripts/gpu-check.sh on the GPU host):
the best node is the fastest correct one, every Judge prompt about a profiled kernel holds that
kernel's Nsight Compute view, and prints the nodes and the summary. Exit 1 when a check fails."""
import json
import pathlib
import sys

run = pathlib.Path(sys.argv[1])
summary = json.loads((run / "summary.json").read_text())
tree = json.loads((run / "tree.json").read_text())["tree"]["nodes"]
problems = []

rows = []
fastest = None
for node in tree[1:]:
    folder = run / "nodes" / str(node["id"])
    ev = json.loads((folder / "eval.json").read_text()) if (folder / "eval.json").exists() else None
    status = ev["status"] if ev else node["state"]["state"]
    speedup = ev["speedup"]["vs_reference"] if ev and ev.get("speedup") else None
    if status == "correct" and speedup is not None and (fastest is None or speedup > fastest[1]):
        fastest = (node["id"], speedup)
    profiled = (folder / "ncu.json").exists() and json.loads((folder / "ncu.json").read_text()).get("profiled")
    rows.append((node["id"], node["parent"], status, speedup, bool(profiled), (node.get("strategy") or "").split("\n")[0][:60]))

    # The Judge's prompt for this node's expansion shows its parent's ncu view.
    prompt = folder / "llm" / "judge-1.md"
    parent = run / "nodes" / str(node["parent"])
    if prompt.exists() and (parent / "ncu.json").exists():
        view = json.loads((parent / "ncu.json").read_text())
        if view.get("profiled"):
            first = view["judge_view"].strip().splitlines()[0]
            if first not in prompt.read_text():
                problems.append(f"node {node['id']}: the Judge's prompt lacks node {node['parent']}'s ncu view")

best = summary.get("best")
if fastest and (not best or best["node"] != fastest[0]):
    problems.append(f"best is {best and best['node']} but the fastest correct node is {fastest[0]}")
if best and not (run / "best" / "kernel.cu").exists():
    problems.append("best/kernel.cu is missing")

print(f"{'node':>4} {'from':>4} {'status':<14} {'speedup':>8} {'ncu':>4}  strategy")
for r in rows:
    sp = f"{r[3]:.3f}x" if r[3] is not None else "-"
    print(f"{r[0]:>4} {r[1]:>4} {r[2]:<14} {sp:>8} {'yes' if r[4] else 'no':>4}  {r[5]}")
print(json.dumps({k: summary[k] for k in ("nodes", "correct", "failed", "correctness_rate", "best", "wall_seconds", "overhead_ms_per_expansion", "stopped_because")}, indent=1))
for p in problems:
    print("PROBLEM:", p)
sys.exit(1 if problems else 0)

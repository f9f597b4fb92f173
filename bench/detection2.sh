#!/usr/bin/env bash
# The external validation set, ../shared/benchmarks/detection2 (written apart from the
# project, never fitted on), over several seed offsets, summed: recall at 24 h lead per
# failure family (the summary's HEADLINE: the warning held to the failure), false warnings
# per 1,000 healthy GPU-days, and sudden drops reported lost.
#
#   bench/detection2.sh [OFFSET…]          # default: 100 101 102 103 104
#   BIN=path/to/gpu-sentinel bench/detection2.sh …      # that build (default: build this tree)
#   BEFORE=path/to/gpu-sentinel bench/detection2.sh …   # and another build on the same data
#   DATA=dir bench/detection2.sh …                      # keep the generated logs (and
#                                                       # each build's summary) there
#
# docs/detection.md quotes its output. Each offset takes about a minute to generate and a
# minute and a half to evaluate per build on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
gen=../shared/benchmarks/detection2/gen.py
[ -f "$gen" ] || { echo "no $gen: the benchmark lives in shared/ beside the repository" >&2; exit 1; }
offsets=("$@")
[ ${#offsets[@]} -gt 0 ] || offsets=(100 101 102 103 104)
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --bin gpu-sentinel
  bin=target/release/gpu-sentinel
fi
data=${DATA:-$(mktemp -d)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Copies, so that a rebuild while the benchmark runs cannot swap them.
cp "$bin" "$work/bin"
builds=(bin)
if [ -n "${BEFORE:-}" ]; then
  cp "$BEFORE" "$work/before"
  builds+=(before)
fi

for offset in "${offsets[@]}"; do
  dir=$data/det2-$offset
  if [ ! -f "$dir/labels.json" ]; then
    python3 "$gen" gen --out "$dir" --seed-offset "$offset" >&2
  fi
  for build in "${builds[@]}"; do
    python3 "$gen" eval --out "$dir" --bin "$work/$build" --no-traj >"$work/$build-$offset.txt" 2>&1 || {
      cat "$work/$build-$offset.txt" >&2
      exit 1
    }
    # Each build's summary and results beside the logs: the next eval writes over them.
    cp "$work/$build-$offset.txt" "$dir/summary-$build.txt"
    cp "$dir/results.json" "$dir/results-$build.json"
  done
done

python3 - "$work" "${builds[*]}" "${offsets[@]}" <<'EOF'
import re, sys
work, builds, offsets = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
for build in builds:
    fam, total, at12, healthy_days, false, lost = {}, [0, 0], [0, 0], 0, 0, [0, 0]
    for o in offsets:
        text = open(f"{work}/{build}-{o}.txt").read()
        head = re.search(r"^HEADLINE recall@24h (\d+)/(\d+) \(([^)]*)\), @12h (\d+)/(\d+)", text, re.M)
        if not head:
            sys.exit(f"offset {o}: no HEADLINE line in the summary")
        total[0] += int(head.group(1)); total[1] += int(head.group(2))
        at12[0] += int(head.group(4)); at12[1] += int(head.group(5))
        for name, w, n in re.findall(r"(\w+) (\d+)/(\d+)", head.group(3)):
            f = fam.setdefault(name, [0, 0]); f[0] += int(w); f[1] += int(n)
        h = re.search(r"^healthy \([^)]*\): \d+ GPUs, (\d+) GPU-days, (\d+) with a false warning", text, re.M)
        healthy_days += int(h.group(1)); false += int(h.group(2))
        d = re.search(r"^smi-csv drops reported lost: (\d+)/(\d+)", text, re.M)
        lost[0] += int(d.group(1)); lost[1] += int(d.group(2))
    print(f"{build}: offsets {' '.join(offsets)}")
    print(f"  recall at 24 h lead: {total[0]}/{total[1]} = {100 * total[0] / total[1]:.0f}%")
    for name, (w, n) in fam.items():
        print(f"    {name:8} {w}/{n}")
    print(f"  recall at 12 h lead: {at12[0]}/{at12[1]} = {100 * at12[0] / at12[1]:.0f}%")
    print(f"  false warnings: {false} in {healthy_days} healthy GPU-days = {1000 * false / healthy_days:.2f} per 1,000")
    print(f"  sudden drops reported lost: {lost[0]}/{lost[1]}")
EOF

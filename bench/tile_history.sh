#!/usr/bin/env bash
# An OpenMetrics history repeated: COPIES copies of FILE, copy k with every timestamp moved
# k × SECONDS later, each family's samples in time order (promtool's backfill wants them so);
# with FROM and TO (Unix seconds), only the samples in [FROM, TO).
#
#   bench/tile_history.sh FILE COPIES SECONDS OUT [FROM TO]
#
# bench/report.sh uses it (TILE_DAYS) to make a week of a fleet's history from one recorded
# day: the same series and values each day, for measuring what reading a week costs. It
# asks for one block's span at a time, so the disk holds a block's history, not the week's.
set -euo pipefail
file=$1 copies=$2 seconds=$3 out=$4 from=${5:-0} to=${6:-99999999999}
families=$(mktemp -d "$(dirname "$out")/tile.XXXXXX")
trap 'rm -rf "$families"' EXIT
# One file a family: a `# TYPE` line starts each; `# EOF` ends the history. (bench/report.sh
# asks a block's span at a time, and each call splits the recording again: one more pass
# over it a block, beside promtool's own.)
awk -v dir="$families" '
/^# TYPE / { n++; f = sprintf("%s/%06d.om", dir, n); print > f; next }
/^# EOF/ { next }
/^#/ { print "only # TYPE and # EOF lines are read: " $0 > "/dev/stderr"; exit 1 }
f != "" { print > f }' "$file"
: >"$out"
for family in "$families"/*.om; do
  head -1 "$family" >>"$out"
  # The family's first and last sample bound each copy's span: copies wholly outside
  # [FROM, TO) are not read.
  first=$(sed -n 2p "$family" | awk '{ print int($NF) }')
  last=$(tail -1 "$family" | awk '{ print int($NF) + 1 }')
  for k in $(seq 0 $((copies - 1))); do
    shift=$((k * seconds))
    if [ -z "$first" ] || [ $((last + shift)) -lt "$from" ] || [ $((first + shift)) -ge "$to" ]; then
      continue
    fi
    # The timestamp is the last field, seconds with or without a fraction; labels may hold
    # spaces.
    tail -n +2 "$family" | awk -v shift="$shift" -v from="$from" -v to="$to" '{
      i = match($0, / [0-9]+(\.[0-9]+)?$/)
      if (i == 0) { print "no timestamp: " $0 > "/dev/stderr"; exit 1 }
      ts = substr($0, i + 1); dot = index(ts, ".")
      if (dot == 0) dot = length(ts) + 1
      s = substr(ts, 1, dot - 1) + shift
      if (s < from || s >= to) next
      printf "%s %d%s\n", substr($0, 1, i - 1), s, substr(ts, dot)
    }' >>"$out"
  done
  rm "$family"
done
echo "# EOF" >>"$out"

#!/usr/bin/env bash
# Compares tests/fixtures/dcgm-dashboard-queries.txt with the queries of a copy of
# dcgm-exporter's dashboard JSON (default: ../shared/third_party/dcgm-exporter/), so the
# list the end-to-end test runs stays the dashboard's. Not part of scripts/test.sh: the
# dashboard is third-party data the project does not carry.
set -euo pipefail
cd "$(dirname "$0")/.."
dashboard=${1:-../shared/third_party/dcgm-exporter/dcgm-exporter-dashboard.json}
python3 - "$dashboard" tests/fixtures/dcgm-dashboard-queries.txt <<'PY'
import json, sys
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            if t.get("expr"):
                yield t["expr"]
        yield from walk(p.get("panels", []))
dash = json.load(open(sys.argv[1]))
want = {e.replace("$instance", ".*").replace("$gpu", ".*") for e in walk(dash.get("panels", []))}
have = {l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
missing = sorted(want - have)
for m in missing:
    print("not in the test list:", m)
print(f"{len(want)} dashboard queries, {len(want) - len(missing)} covered")
sys.exit(1 if missing else 0)
PY

#!/usr/bin/env python3
"""Ground truth of a history `gpu-sentinel record --format openmetrics` wrote, for
bench/report.sh: each team's busy and idle GPU-hours, the development hosts (idle at
night by construction), and each host's mean GPU utilization, percent, in the night window
the report uses (02:00-06:00 UTC): an inference host's trough follows the recording's start
and may fall there, around the idle line, so such a host may be night-idle too.

    report_truth.py FILE native|dcgm INTERVAL_SECONDS HOSTS > truth.json

Teams as bench/report.sh configures them: owners (namespaces) `ml-*` are research
(dcgm-exporter: also every GPU of sim-node-02), `inference` is serving, the rest
unassigned. gpu-sentinel's: each owner counter's last value minus its first.
dcgm-exporter's: a GPU is held at a sample while DCGM_FI_DEV_FB_USED is over 1024 MiB or a
pod is mapped, busy while held and DCGM_FI_DEV_GPU_UTIL is at least 5; each sample stands
for one interval. Streams the file: memory holds one float a GPU and step.
"""

import array
import datetime
import json
import re
import sys

NIGHT_HOURS = (2, 3, 4, 5)

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def team(owner, host, dcgm):
    if owner.startswith("ml-") or (dcgm and host == "sim-node-02"):
        return "research"
    if owner == "inference":
        return "serving"
    return "unassigned"


def main():
    path, dialect, interval, hosts = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    dcgm = dialect == "dcgm"
    teams = {}
    counters = {}
    first = None
    names = ["research", "serving", "unassigned"]
    # dcgm-exporter's: per GPU, utilization by step, and the held samples' steps and teams.
    util = {}
    held_steps = {}
    held_teams = {}
    host_index = {f"sim-node-{i + 1:02d}": i for i in range(hosts)}
    # Per host, the sum and count of its GPUs' utilization samples (percent) in night hours.
    night = {}
    hour_of = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            m = SAMPLE.match(line.rstrip("\n"))
            if not m:
                continue
            name, labels, value, at = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
            if first is None:
                first = at
            if name in ("DCGM_FI_DEV_GPU_UTIL", "gpu_utilization_ratio"):
                whole = int(at) // 3600
                hour = hour_of.get(whole)
                if hour is None:
                    hour = datetime.datetime.fromtimestamp(whole * 3600, datetime.timezone.utc).hour
                    hour_of[whole] = hour
                if hour in NIGHT_HOURS:
                    lab = dict(LABEL.findall(labels))
                    host = lab.get("Hostname" if dcgm else "instance", "")
                    cell = night.setdefault(host, [0.0, 0])
                    cell[0] += value if dcgm else value * 100.0
                    cell[1] += 1
            if dcgm:
                if name not in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
                    continue
                lab = dict(LABEL.findall(labels))
                host, gpu = lab.get("Hostname", ""), int(lab.get("gpu", "0"))
                step = int(round((at - first) / interval))
                if host not in host_index or step < 0:
                    continue
                key = host_index[host] * 8 + gpu
                if name == "DCGM_FI_DEV_GPU_UTIL":
                    cells = util.setdefault(key, array.array("f"))
                    if len(cells) <= step:
                        cells.extend([-1.0] * (step + 1 - len(cells)))
                    cells[step] = value
                elif value > 1024 or lab.get("pod", ""):
                    owner = lab.get("namespace", "")
                    held_steps.setdefault(key, array.array("i")).append(step)
                    held_teams.setdefault(key, array.array("b")).append(names.index(team(owner, host, True)))
            elif name == "gpu_owner_seconds_total":
                lab = dict(LABEL.findall(labels))
                key = labels
                if key not in counters:
                    counters[key] = [value, value, team(lab.get("owner", ""), lab.get("instance", ""), False), lab.get("state", "")]
                counters[key][1] = value
    if dcgm:
        for key, steps in held_steps.items():
            cells = util.get(key, array.array("f"))
            for step, which in zip(steps, held_teams[key]):
                busy = step < len(cells) and cells[step] >= 5.0
                entry = teams.setdefault(names[which], {"busy": 0.0, "idle": 0.0})
                entry["busy" if busy else "idle"] += interval / 3600.0
    else:
        for start, end, name, state in counters.values():
            entry = teams.setdefault(name, {"busy": 0.0, "idle": 0.0})
            if state in ("busy", "idle"):
                entry[state] += (end - start) / 3600.0
    development = [f"sim-node-{i + 1:02d}" for i in range(hosts) if i % 4 == 2]
    night_utilization = {h: s / n for h, (s, n) in sorted(night.items()) if n}
    json.dump({"teams": teams, "night_idle_hosts": development,
               "night_utilization": night_utilization}, sys.stdout)


if __name__ == "__main__":
    main()

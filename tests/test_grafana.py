#!/usr/bin/env python3
"""test_grafana.py GRAFANA.json METRICS_HEADER -- every metric the Grafana
dashboard queries is one the agent exports (names from runtime/al_metrics.h and
the built-in per-peer and histogram families), so the dashboard cannot silently
chart nothing after a rename."""
import json
import re
import sys

dash = json.load(open(sys.argv[1]))
header = open(sys.argv[2]).read()
exported = set(re.findall(r'"(autoloco_[a-z_]+)"', header))
exported |= {"autoloco_peer_sent_bytes_total", "autoloco_peer_received_bytes_total",
             "autoloco_round_duration_seconds_bucket"}
used, bad = set(), []
for p in dash["panels"]:
    for t in p["targets"]:
        for name in re.findall(r"\b(autoloco_[a-z_]+)\b", t["expr"]):
            used.add(name)
            if name not in exported:
                bad.append((p["title"], name))
for title, name in bad:
    print(f"FAIL: panel '{title}' queries {name}, which the agent does not export")
print(f"{len(used) - len(set(n for _, n in bad))} passed, {len(bad)} failed")
sys.exit(1 if bad else 0)

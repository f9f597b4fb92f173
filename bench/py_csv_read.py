#!/usr/bin/env python3
"""The baseline of bench/replay.sh: Python's csv module merely reading FILE, every row
materialised as a list of strings, nothing computed.

Usage: py_csv_read.py FILE
"""
import csv
import sys

with open(sys.argv[1], newline="") as f:
    rows = [r for r in csv.reader(f)]
print(len(rows), "rows", file=sys.stderr)

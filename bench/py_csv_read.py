#!/usr/bin/env python3
"""A baseline of bench/replay.sh: Python's csv module merely reading FILE, a plain loop over
csv.reader that keeps no row (each row is a fresh list of strings, dropped at once). The
loop counts the rows and their fields, nothing else; it prints the data rows (the header
not counted) and the fields of all rows on stdout.

Usage: py_csv_read.py FILE
"""
import csv
import sys

rows = fields = 0
with open(sys.argv[1], newline="") as f:
    for r in csv.reader(f):
        rows += 1
        fields += len(r)
print(rows - 1, fields)

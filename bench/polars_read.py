#!/usr/bin/env python3
"""A baseline of bench/replay.sh: polars.read_csv parsing FILE into a DataFrame, nothing
computed. Every column is read as a string (`infer_schema=False`): nvidia-smi writes a
space after each comma and units in the cells ("100 %", "61234 MiB"), so polars' own
inference makes every column a string on these logs anyway; asking for it keeps the first
100 rows from deciding. polars runs on its default thread pool (what a user gets).

Prints on stdout the DataFrame's rows and columns, polars' thread count, its version, and
the seconds read_csv itself took (the process's wall time also counts starting Python and
importing polars).

Usage: polars_read.py FILE
"""
import sys
import time

import polars as pl

start = time.perf_counter()
df = pl.read_csv(sys.argv[1], infer_schema=False)
took = time.perf_counter() - start
print(df.height, df.width, pl.thread_pool_size(), pl.__version__, f"{took:.3f}")

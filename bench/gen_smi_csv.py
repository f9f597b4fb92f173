#!/usr/bin/env python3
"""Writes an nvidia-smi CSV log for bench/replay.sh: ROWS rows, 8 GPUs interleaved, a round
every 5 s, the 29 fields of tests/fixtures/smi/units.csv with their units, as
`nvidia-smi --query-gpu=... --format=csv -l 5` writes them. Deterministic (seeded).

Usage: gen_smi_csv.py ROWS > FILE
"""
import datetime
import random
import sys

HEADER = (
    "timestamp, index, uuid, name, pci.bus_id, driver_version, pstate, pcie.link.gen.max, "
    "pcie.link.gen.current, pcie.link.width.current, temperature.gpu, temperature.memory, "
    "utilization.gpu [%], utilization.memory [%], memory.total [MiB], memory.free [MiB], "
    "memory.used [MiB], power.draw [W], enforced.power.limit [W], clocks.sm [MHz], "
    "clocks.mem [MHz], clocks.max.sm [MHz], fan.speed [%], clocks_event_reasons.active, "
    "clocks_event_reasons.hw_thermal_slowdown, ecc.errors.corrected.volatile.total, "
    "ecc.errors.uncorrected.volatile.total, remapped_rows.pending, remapped_rows.failure"
)
GPUS = 8
TOTAL = 81559


def main():
    rows = int(sys.argv[1])
    rng = random.Random(42)
    start = datetime.datetime(2026, 3, 2, 0, 0, 0)
    out = sys.stdout
    out.write(HEADER + "\n")
    corrected = [0] * GPUS
    for n in range(rows):
        k, i = divmod(n, GPUS)
        t = start + datetime.timedelta(seconds=5 * k, milliseconds=2 + 3 * i)
        busy = (k // 720 + i) % 5 != 0  # an hour idle now and then
        util = rng.randint(85, 100) if busy else 0
        used = 61234 + 512 * i if busy or i % 2 else 0
        temp = rng.randint(55, 68) if busy else rng.randint(33, 38)
        if i == 3 and rng.random() < 0.002:
            corrected[i] += 1  # GPU 3 slowly accumulates corrected ECC errors
        thermal = i == 5 and k % 5000 < 20
        mask = 0x40 if thermal else (0 if busy else 1)
        out.write(
            f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}, {i}, "
            f"GPU-{i:08x}-5a1c-4e8f-9a61-0c7d2e4b8f10, NVIDIA H100 80GB HBM3, "
            f"00000000:{0x18 + 0x11 * i:02X}:00.0, 570.124.06, P0, 5, 5, 16, {temp}, "
            f"{temp + rng.randint(2, 9)}, {util} %, {util // 3} %, {TOTAL} MiB, "
            f"{TOTAL - used - 479} MiB, {used} MiB, {rng.uniform(480, 690) if busy else 70.0:.2f} W, "
            f"700.00 W, {1980 if busy else 345} MHz, 2619 MHz, 1980 MHz, [N/A], 0x{mask:016X}, "
            f"{'Active' if thermal else 'Not Active'}, {corrected[i]}, 0, No, No\n"
        )


if __name__ == "__main__":
    main()

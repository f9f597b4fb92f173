#!/usr/bin/env python3
"""Writes an nvidia-smi CSV log for bench/replay.sh, as `nvidia-smi --query-gpu=...
--format=csv -l 5` writes it: ROWS rows, the GPUs of a round interleaved, a round every 5 s.
Deterministic (seeded).

Two shapes:

- `wide` (the default): 8 GPUs, the 29 fields of tests/fixtures/smi/units.csv with their
  units;
- `narrow`: 64 GPUs, the 10 fields an operator logs to watch load and health: timestamp,
  index, uuid, utilization.gpu, utilization.memory, memory.used, temperature.gpu,
  power.draw, clocks.sm, ecc.errors.corrected.volatile.total.

Usage: gen_smi_csv.py ROWS [wide|narrow] > FILE
"""
import datetime
import random
import sys

WIDE_HEADER = (
    "timestamp, index, uuid, name, pci.bus_id, driver_version, pstate, pcie.link.gen.max, "
    "pcie.link.gen.current, pcie.link.width.current, temperature.gpu, temperature.memory, "
    "utilization.gpu [%], utilization.memory [%], memory.total [MiB], memory.free [MiB], "
    "memory.used [MiB], power.draw [W], enforced.power.limit [W], clocks.sm [MHz], "
    "clocks.mem [MHz], clocks.max.sm [MHz], fan.speed [%], clocks_event_reasons.active, "
    "clocks_event_reasons.hw_thermal_slowdown, ecc.errors.corrected.volatile.total, "
    "ecc.errors.uncorrected.volatile.total, remapped_rows.pending, remapped_rows.failure"
)
NARROW_HEADER = (
    "timestamp, index, uuid, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "temperature.gpu, power.draw [W], clocks.sm [MHz], ecc.errors.corrected.volatile.total"
)
TOTAL = 81559
SHAPES = {"wide": (8, WIDE_HEADER), "narrow": (64, NARROW_HEADER)}


def main():
    rows = int(sys.argv[1])
    shape = sys.argv[2] if len(sys.argv) > 2 else "wide"
    if shape not in SHAPES:
        sys.exit(f"unknown shape {shape!r}: wide or narrow")
    gpus, header = SHAPES[shape]
    rng = random.Random(42)
    start = datetime.datetime(2026, 3, 2, 0, 0, 0)
    out = sys.stdout
    out.write(header + "\n")
    corrected = [0] * gpus
    for n in range(rows):
        k, i = divmod(n, gpus)
        # nvidia-smi writes a round's rows a little apart: 3 ms a GPU (64 GPUs: 192 ms).
        t = start + datetime.timedelta(seconds=5 * k, milliseconds=2 + 3 * i)
        stamp = f"{t:%Y/%m/%d %H:%M:%S}.{t.microsecond // 1000:03d}"
        uuid = f"GPU-{i:08x}-5a1c-4e8f-9a61-0c7d2e4b8f10"
        busy = (k // 720 + i) % 5 != 0  # an hour idle now and then
        util = rng.randint(85, 100) if busy else 0
        used = 61234 + 512 * (i % 8) if busy or i % 2 else 0
        temp = rng.randint(55, 68) if busy else rng.randint(33, 38)
        if i == 3 and rng.random() < 0.002:
            corrected[i] += 1  # GPU 3 slowly accumulates corrected ECC errors
        sm = 1980 if busy else 345
        if shape == "narrow":
            power = rng.uniform(480, 690) if busy else 70.0
            out.write(
                f"{stamp}, {i}, {uuid}, {util} %, {util // 3} %, {used} MiB, {temp}, "
                f"{power:.2f} W, {sm} MHz, {corrected[i]}\n"
            )
            continue
        memory_temp = temp + rng.randint(2, 9)
        power = rng.uniform(480, 690) if busy else 70.0
        thermal = i == 5 and k % 5000 < 20
        mask = 0x40 if thermal else (0 if busy else 1)
        out.write(
            f"{stamp}, {i}, {uuid}, NVIDIA H100 80GB HBM3, "
            f"00000000:{0x18 + 0x11 * i:02X}:00.0, 570.124.06, P0, 5, 5, 16, {temp}, "
            f"{memory_temp}, {util} %, {util // 3} %, {TOTAL} MiB, "
            f"{TOTAL - used - 479} MiB, {used} MiB, {power:.2f} W, "
            f"700.00 W, {sm} MHz, 2619 MHz, 1980 MHz, [N/A], 0x{mask:016X}, "
            f"{'Active' if thermal else 'Not Active'}, {corrected[i]}, 0, No, No\n"
        )


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# What the C library's memcmp costs on a zero-length compare of the dangling pointer an
# empty Rust String holds (0x1), against the same compare of real pointers: glibc's
# AVX-512 memcmp reads its operands with a masked load even for zero bytes, and at an
# unmapped address that load takes a fault-suppression assist (crates/core/src/text.rs).
#
#   bench/memcmp-empty.sh      # prints ns a call for both, 10 million calls each
set -euo pipefail
command -v cc >/dev/null || { echo "missing a C compiler (apt-get install gcc)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/mc.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
  int dangling = argc > 1 && argv[1][0] == 'd';
  volatile size_t n = 0;
  char a[64] = {0}, b[64] = {0};
  const char *p = dangling ? (const char *)1 : a, *q = dangling ? (const char *)1 : b;
  int (*volatile f)(const void *, const void *, size_t) = memcmp;
  struct timespec t0, t1;
  long s = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 10000000; i++) s += f(p, q, n);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%s pointers: %.1f ns a call (%ld)\n", dangling ? "dangling" : "real",
         ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e7, s);
  return 0;
}
C
cc -O2 "$work/mc.c" -o "$work/mc"
"$work/mc" real
"$work/mc" dangling

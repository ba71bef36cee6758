#!/usr/bin/env bash
# sluice's own AES-GCM against OpenSSL's on TLS records of 16 KiB, one core, alternating
# rounds (Benchmarks/aesgcm.c, compiled here with clang -O2 against the library's gcm.c and
# libcrypto; OpenSSL's through the record layer's own calls). Prints GB/s per way and round,
# the medians, and own/OpenSSL per round's median and range, for AES-128 and AES-256, then
# the CPU.
#
#   Benchmarks/aesgcm.sh          # 7 rounds
#   ROUNDS=15 Benchmarks/aesgcm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
clang -O2 -ISources/CSluiceEngines/include -ISources/CCrypto Benchmarks/aesgcm.c Sources/CSluiceEngines/gcm.c \
    -lssl -lcrypto -o "$T/aesgcm"
"$T/aesgcm" "${ROUNDS:-7}"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), $(openssl version)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env python3
"""Benchmarks/watch-probe.py SRC DST COUNT RATE [SIZE]: writes COUNT files of SIZE bytes
(default 4096) into SRC, RATE a second, each written and closed at once, and for each waits
until DST holds it whole (polled every 0.2 ms, 10 s at most); prints the latencies from each
file's close to its arrival (ms), then the median and the 99th percentile. Used by
Benchmarks/watch.sh for sluice send --watch and for lsyncd alike."""
import os
import sys
import time

src, dst, count, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
size = int(sys.argv[5]) if len(sys.argv) > 5 else 4096
latencies = []
missed = 0
start = time.monotonic()
for index in range(count):
    due = start + index / rate
    pause = due - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    name = "f%06d" % index
    data = os.urandom(size)
    with open(os.path.join(src, name), "wb") as f:
        f.write(data)
    closed = time.monotonic()
    target = os.path.join(dst, name)
    deadline = closed + 10
    while True:
        try:
            if os.stat(target).st_size == size:
                break
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            missed += 1
            break
        time.sleep(0.0002)
    latencies.append((time.monotonic() - closed) * 1000)
latencies.sort()
median = latencies[len(latencies) // 2]
p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
print("changes %d median_ms %.2f p99_ms %.2f max_ms %.2f missed %d" % (count, median, p99, latencies[-1], missed))

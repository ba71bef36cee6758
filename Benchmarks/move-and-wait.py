#!/usr/bin/env python3
"""Renames SRC to DST, then waits for each PATH in turn to exist; prints the seconds from the
rename to each, one line each. The first is looked for every 0.5 ms (a first arrival is timed
in tens of milliseconds), the others every 5 ms (a last arrival is timed in seconds).

The watch benchmarks time what a watch does after a change. Waiting in the shell (`while [ !
-f … ]; do sleep 0.002; done`) forks a `sleep` 500 times a second: about a third of a core on
this kind of machine, taken from the two processes being timed while a one-shot run it is
compared with is timed by `wait` alone. One process polling `stat` costs next to nothing.
"""

import os
import sys
import time

source, destination, *paths = sys.argv[1:]
start = time.monotonic()
os.rename(source, destination)
for number, path in enumerate(paths):
    while not os.path.exists(path):
        time.sleep(0.0005 if number == 0 else 0.005)
    print("%.4f" % (time.monotonic() - start), flush=True)

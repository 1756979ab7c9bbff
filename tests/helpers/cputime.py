"""Where a test run's time went: the lines ``PYMPI_TEST_CPU=FILE python -m pytest`` wrote (tests/conftest.py),
summed by test file and listed by test, the costliest first.

    python -m tests.helpers.cputime FILE [--top N]
"""

from __future__ import annotations

import argparse
import collections
import json


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.cputime", description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    files = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += r["wall"]
        f[1] += r["cpu"]
        f[2] += 1
    wall, cpu = sum(r["wall"] for r in rows), sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests: wall {wall:,.0f} s, CPU {cpu:,.0f} s")
    print(f"{'file':60s} {'tests':>5s} {'wall s':>8s} {'CPU s':>8s}")
    for name, (w, c, n) in sorted(files.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{name:60s} {n:5d} {w:8.0f} {c:8.0f}")
    print()
    for r in sorted(rows, key=lambda r: -r["cpu"])[:args.top]:
        print(f"{r['cpu']:8.1f} {r['wall']:8.1f}  {r['test']}")


if __name__ == "__main__":
    main()

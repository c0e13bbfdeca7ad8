"""Summarises py-spy's collapsed-stack files (``pipeline_bench.py --profile``): per process, the functions
with the most samples on the stack (inclusive) and at its top (self).

Run: ``.venv/bin/python bench/profile_top.py DIR [--top 25]``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def summarise(path: Path, top: int) -> None:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [f.split(" (")[0] + " " + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] for f in stack.split(";")]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    print(f"\n== {path.stem}: {total} samples")
    print("  inclusive:")
    for frame, count in inclusive.most_common(top):
        print(f"    {100 * count / total:5.1f}%  {frame}")
    print("  self:")
    for frame, count in own.most_common(top):
        print(f"    {100 * count / total:5.1f}%  {frame}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for path in sorted(args.directory.glob("*.txt")):
        summarise(path, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

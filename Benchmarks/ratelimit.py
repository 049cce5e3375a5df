#!/usr/bin/env python3
"""Bandwidth limits (issue 11): how close `resumable get --limit-rate RATE` stays to RATE, window by window.

Starts nginx on a free 127.0.0.1 port with a config it writes (unthrottled: the limit is the client's), creates a
random file of RATE x DURATION bytes for each limit, and runs `resumable get --limit-rate RATE --json` with
`--connections 1` and `--connections 4`, timestamping each JSON event line as it arrives on stderr (as
`segments.py` does). From the `progress` events' `bytesOnDisk` (interpolated at the window edges) it reports, for
every whole WINDOW-second window from the first progress event on, the achieved rate against the limit; the goal is
within +-5 %. It also reports the whole run's rate (first progress event to exit) and checks the lower bound every
limit must obey: the bytes minus the burst (50 ms of the rate, at least 16 KiB) take at least that at the rate.

Every output file is compared with the served file (`cmp`); a wrong file fails the benchmark.

    python3 Benchmarks/ratelimit.py                      # 2M, then 512k and 8M; 1 and 4 connections; 35 s each
    python3 Benchmarks/ratelimit.py --quick              # what CI can run (< 30 s once built): 4 s runs, 2 s windows
    python3 Benchmarks/ratelimit.py --resumable PATH     # use this binary instead of building one

Prints Markdown tables. Only loopback traffic.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import clear, human, machine, make_file, parse_size  # noqa: E402
from segments import Nginx, build, load_note, run_events, same_file  # noqa: E402


def cumulative_at(points, t):
    """Bytes on disk at time `t`, interpolated linearly between the (time, bytes) points around it."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, b0), (t1, b1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def measure(resumable, url, reference, out, rate_text, rate, connections, window):
    """One limited download; returns a row with its windows."""
    clear(out)
    command = [resumable, "get", url, "-o", out + "/", "--limit-rate", rate_text, "--connections",
               str(connections), "--json", "--overwrite"]
    status, wall, cpu, _, events, result = run_events(command)
    if status != 0:
        raise SystemExit(f"resumable failed (exit status {status})")
    output = os.path.join(out, os.path.basename(reference))
    if not same_file(output, reference):
        raise SystemExit(f"resumable wrote a wrong file: {output} differs from {reference}")
    points = [(t, e["bytesOnDisk"]) for t, e in events if e.get("event") == "progress"]
    size = os.path.getsize(reference)
    start = points[0][0]
    # The last point: the file complete when the process exited (the final progress event may come earlier).
    points.append((wall, size))
    windows = []
    edge = start
    while edge + window <= wall:
        achieved = (cumulative_at(points, edge + window) - cumulative_at(points, edge)) / window
        windows.append(achieved)
        edge += window
    burst = max(rate // 20, 16 << 10)
    floor = (size - points[0][1] - burst) / rate  # bytes after the first event, less the burst, at the rate
    return {
        "connections": connections, "limit": rate, "size": size, "wall": wall, "cpu": cpu,
        "overall": (size - points[0][1]) / (wall - start), "windows": windows,
        "lower_bound_ok": wall - start >= floor - 0.001,
        "peak_connections": max((e.get("connections", 1) for _, e in events if e.get("event") == "progress"),
                                default=1),
        "transport": (result or {}).get("transport"),
    }


def report(rows, window):
    print(f"\n| limit | connections | windows of {window:g} s: achieved / limit | worst | overall | "
          f"within +-5 % | lower bound |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        ratios = [w / row["limit"] for w in row["windows"]]
        worst = max((abs(r - 1) for r in ratios), default=float("nan"))
        shown = " ".join(f"{r:.3f}" for r in ratios)
        print(f"| {human(row['limit'])}/s | {row['connections']} (peak {row['peak_connections']}) | {shown} | "
              f"{worst * 100:.1f} % | {row['overall'] / row['limit']:.3f} | {'yes' if worst <= 0.05 else 'NO'} | "
              f"{'kept' if row['lower_bound_ok'] else 'BROKEN'} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limits", default="2M,512k,8M",
                        help="comma-separated --limit-rate values (default 2M,512k,8M); the first is the main one")
    parser.add_argument("--duration", type=float, default=35, help="seconds each download should take (default 35)")
    parser.add_argument("--window", type=float, default=10, help="window length in seconds (default 10)")
    parser.add_argument("--connections", default="1,4", help="comma-separated connection counts (default 1,4)")
    parser.add_argument("--quick", action="store_true",
                        help="CI mode: 2M only, 4 s downloads, 2 s windows, 1 and 4 connections")
    parser.add_argument("--scratch-path", help="build into this --scratch-path instead of .build")
    parser.add_argument("--resumable", help="use this resumable binary instead of building one")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.limits, args.duration, args.window = "2M", 4, 2

    resumable = args.resumable or build(args.scratch_path)
    limits = [(text, parse_size(text)) for text in args.limits.split(",")]
    counts = [int(c) for c in args.connections.split(",")]
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = tempfile.mkdtemp(prefix="resumable-ratelimit-files-", dir=base)
    out = tempfile.mkdtemp(prefix="resumable-ratelimit-out-", dir=base)
    server = Nginx(root, "0", 1, "0")
    rows = []
    try:
        print(f"# Rate limits\n\n{machine()} {load_note()}\n")
        print(f"nginx unthrottled on loopback; files in tmpfs; `resumable get --limit-rate L --connections N "
              f"--json`; windows of {args.window:g} s from the first progress event.")
        for text, rate in limits:
            name = f"limit-{text}.bin"
            reference = os.path.join(root, name)
            make_file(reference, int(rate * args.duration))
            for connections in counts:
                print(f"  --limit-rate {text} --connections {connections} …", file=sys.stderr, flush=True)
                rows.append(measure(resumable, server.url(name), reference, out, text, rate, connections,
                                    args.window))
            os.unlink(reference)
        report(rows, args.window)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    failed = [r for r in rows if not r["lower_bound_ok"]]
    if failed:
        raise SystemExit("a download was faster than its limit allows")


if __name__ == "__main__":
    main()

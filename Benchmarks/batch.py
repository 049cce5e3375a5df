#!/usr/bin/env python3
"""Many downloads at once (issue 11): `resumable get -i LIST -j 8` against `aria2c -i LIST -j 8` and
`curl --parallel --parallel-max 8`, and a queue of 10,000 tasks restored from its task store.

Starts nginx on a free 127.0.0.1 port (see segments.py's `Nginx`; the unthrottled location, keep-alive on),
writes COUNT random files of SIZE, and measures:

1. COUNT files of SIZE, 8 at a time, into tmpfs: the three tools alternately (the order flips every round), wall
   time medians, CPU, peak RSS (GNU time). Every file of every run is compared with the served one.
2. 10,000 queued tasks: a task store holding 10,000 version-1 records (docs/task-store.md) for files served at
   1 KiB/s, `resumable resume --state DIR -j 8 --json`: the time from the process's start to the first
   `task-started` event (everything before it is the process's start and `restore()` of all 10,000 records), then
   SIGINT, which pauses the 8 running ones into the store; peak RSS of the whole run (GNU time).

    python3 Benchmarks/batch.py                   # 1,000 x 256 KiB, 5 rounds + a warm-up round
    python3 Benchmarks/batch.py --quick           # 200 files, 1 round, no warm-up: what CI can run
    python3 Benchmarks/batch.py --only restore    # section 2 alone (--only many: section 1 alone)
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import clear, machine, run  # noqa: E402
from segments import Nginx, build  # noqa: E402


def same_tree(out, root, names):
    for name in names:
        path = os.path.join(out, name)
        with open(path, "rb") as a, open(os.path.join(root, name), "rb") as b:
            if a.read() != b.read():
                return False
    return True


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def section_many(resumable, server, root, names, rounds, warmup, report):
    lst = os.path.join(root, "..", "list.txt")
    with open(lst, "w") as f:
        for name in names:
            f.write(server.url(name) + "\n")
    out = tempfile.mkdtemp(prefix="resumable-batch-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    state = tempfile.mkdtemp(prefix="resumable-batch-state-", dir=out)
    curl_config = os.path.join(root, "..", "curl.cfg")
    with open(curl_config, "w") as f:
        for name in names:
            f.write(f'url = "{server.url(name)}"\noutput = "{os.path.join(out, name)}"\n')
    commands = {
        "resumable get -i LIST -j 8": lambda: [resumable, "get", "-i", lst, "-j", "8", "-o", out + "/", "--state",
                                               os.path.join(state, "s"), "-q"],
        "aria2c -i LIST -j 8": lambda: ["aria2c", "-q", "-i", lst, "-j", "8", "-d", out, "--allow-overwrite=true",
                                        "--auto-file-renaming=false"],
        "curl --parallel --parallel-max 8": lambda: ["curl", "-s", "--parallel", "--parallel-max", "8", "-K",
                                                     curl_config],
    }
    available = {k: v for k, v in commands.items() if shutil.which(v()[0]) or os.path.exists(v()[0])}
    results = {name: [] for name in available}
    order = list(available)
    total = warmup + rounds
    for round_index in range(total):
        print(f"  round {round_index + 1}/{total}{' (warm-up)' if round_index < warmup else ''} …",
              file=sys.stderr, flush=True)
        for name in (order if round_index % 2 == 0 else list(reversed(order))):
            clear(out)
            os.makedirs(state, exist_ok=True)
            shutil.rmtree(os.path.join(state, "s"), ignore_errors=True)
            status, wall, cpu, rss, _ = run(available[name]())
            if status != 0:
                raise SystemExit(f"{name} failed ({status})")
            if not same_tree(out, root, names):
                raise SystemExit(f"{name} wrote a wrong file")
            if round_index >= warmup:
                results[name].append((wall, cpu, rss))
    report(f"| command | wall (median) | min – max | CPU | peak RSS |")
    report("| --- | --- | --- | --- | --- |")
    medians = {}
    for name, rows in results.items():
        walls = [r[0] for r in rows]
        medians[name] = median(walls)
        report(f"| `{name}` | {median(walls):.2f} s | {min(walls):.2f} – {max(walls):.2f} | "
               f"{median([r[1] for r in rows]):.2f} s | {max(r[2] for r in rows):.1f} MiB |")
    peers = [v for k, v in medians.items() if not k.startswith("resumable")]
    if peers:
        ours = medians["resumable get -i LIST -j 8"]
        best = min(peers)
        report("")
        report(f"Goal: no slower than the faster peer: {ours:.2f} s vs {best:.2f} s ({ours / best:.3f}×) — "
               f"**{'met' if ours <= best else 'missed'}**")
    shutil.rmtree(out, ignore_errors=True)


def section_restore(resumable, server, root, count, report):
    name = "slow.bin"
    with open(os.path.join(root, name), "wb") as f:
        f.write(os.urandom(1 << 20))
    state = tempfile.mkdtemp(prefix="resumable-batch-10k-")
    out = tempfile.mkdtemp(prefix="resumable-batch-10k-out-")
    tasks = os.path.join(state, "tasks")
    os.makedirs(tasks)
    os.makedirs(os.path.join(state, "partial"))
    for directory in (state, tasks, os.path.join(state, "partial")):
        os.chmod(directory, 0o700)
    url = server.url(name, "limited")
    for index in range(count):
        task = str(uuid.uuid4())
        record = {"version": 1, "id": task, "url": f"{url}?n={index}", "destination": out + f"/f{index}.bin",
                  "priority": 0, "order": index, "state": "queued"}
        with open(os.path.join(tasks, task + ".json"), "w") as f:
            json.dump(record, f)
    time_tool = "/usr/bin/time"
    command = [time_tool, "-f", "@@rusage %M %U %S", resumable, "resume", "--state", state, "-j", "8", "--json"]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = None
    rusage = None
    for line in process.stderr:
        if first is None and '"task-started"' in line:
            first = time.monotonic() - start
            # SIGINT the resumable process itself (GNU time's child).
            subprocess.run(["pkill", "-INT", "-P", str(process.pid)])
        if line.startswith("@@rusage "):
            rusage = line.split()
    process.wait()
    wall = time.monotonic() - start
    rss = int(rusage[1]) / 1024 if rusage else float("nan")
    remaining = len(os.listdir(tasks))
    report(f"| tasks in the store | time to the first start (process start + restore) | whole run until paused | "
           f"peak RSS | records after SIGINT |")
    report("| --- | --- | --- | --- | --- |")
    report(f"| {count:,} | {first:.2f} s | {wall:.2f} s | {rss:.1f} MiB | {remaining:,} |")
    report("")
    report(f"Goals: restore under 1 s: {'**met**' if first is not None and first < 1 else '**missed**'}; "
           f"peak RSS ≤ 64 MiB: {'**met**' if rss <= 64 else '**missed**'}.")
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size", type=int, default=256 << 10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--resumable")
    parser.add_argument("--scratch-path")
    parser.add_argument("--only", choices=["many", "restore"], help="run one section: 1 (many) or 2 (restore)")
    args = parser.parse_args()
    if args.quick:
        args.count, args.rounds, args.tasks = 200, 1, 2000
    warmup = 0 if args.quick else 1
    resumable = args.resumable or build(args.scratch_path)
    work = tempfile.mkdtemp(prefix="resumable-batch-")
    root = os.path.join(work, "www")
    os.makedirs(root)
    names = [f"f{index:05d}.bin" for index in range(args.count)]
    for name in names:
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(args.size))
    # /limited/ at 1 KiB/s serves the 10,000 queued tasks (they must not finish while measured); the files of
    # section 1 come from the unthrottled location.
    server = Nginx(root, "1k", 1, "256k")
    try:
        def report(line=""):
            print(line, flush=True)
        report("# Many downloads: `resumable get -i LIST -j 8`")
        report("")
        report(f"Machine: {machine()}.")
        report("")
        if args.only != "restore":
            report(f"## 1. {args.count:,} files of {args.size // 1024} KiB from nginx on loopback, 8 at a time, "
                   "into tmpfs")
            report("")
            section_many(resumable, server, root, names, args.rounds, warmup, report)
            report("")
        if args.only != "many":
            report(f"## 2. {args.tasks:,} queued tasks restored from a task store")
            report("")
            section_restore(resumable, server, root, args.tasks, report)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

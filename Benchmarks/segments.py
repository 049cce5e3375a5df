#!/usr/bin/env python3
"""Several connections at once (issue 10): `resumable get --connections N|auto` against aria2c and axel.

Starts nginx on a free 127.0.0.1 port with a config it writes, creates random test files, and measures:

1. A file served at `--rate` per connection (`limit_rate 8m; sendfile_max_chunk 256k;`, see `Nginx`):
   `resumable get --connections 1`, `4`, `8`, `16`, `auto`, `aria2c -x4 -s4 -k1M`, `axel -n 4` and
   `aria2c -x16 -s16 -k1M`, alternately (the order flips every round), into tmpfs. Wall time medians, speed-up
   against one connection, ratio to the physical limit size / (n x rate), and auto's throughput as a fraction
   of aria2c -x16's.
2. `auto`, and `--connections 8`, against a server that allows 4 connections per client
   (`limit_conn perip 4;`, a 503 beyond): wall time, the peak connection count of the progress events,
   `segment-failed` events, and nginx's 503s.
3. An unthrottled 1 GiB file onto the disk and into tmpfs: `--connections 1`, `auto` and `4`, each without and
   with `--sha256 HEX`: wall time medians, CPU time and peak RSS (GNU time).
4. The ramp of `auto` on the throttled server (and on one with nginx's own 2 MiB chunks): `--json` progress
   events, each timestamped as its line arrives, printed whenever the connection count changes.

Every output file is compared with the served file (`cmp`); a wrong file fails the benchmark.

    python3 Benchmarks/segments.py                  # 100 MiB throttled, 1 GiB unthrottled, 5 rounds + warm-up
    python3 Benchmarks/segments.py --quick          # what CI can run: small files, 1 round, no warm-up
    python3 Benchmarks/segments.py --only 2,4       # only some sections

Prints Markdown tables. Only loopback traffic. aria2c and axel are optional (Debian packages `aria2`, `axel`):
a missing one is skipped and said so.
"""

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import ROOT, clear, free_port, human, machine, make_file, parse_size, run  # noqa: E402

MiB = 1 << 20
FILE_NAME = "seg.bin"
BIG_NAME = "big.bin"


# ----------------------------------------------------------------------------------------------------------------
# Setup


def build(scratch):
    """The release `resumable`, linked like a shipped command-line tool: the Swift runtime and Foundation static
    (`--static-swift-stdlib`), which saves about 20 ms of dynamic linking per process, a fair share of a 3 s
    download compared with C tools. `scratch` is a --scratch-path or None. Retries a failing build (a tree
    mid-edit)."""
    command = ["swift", "build", "-c", "release", "--product", "resumable", "--static-swift-stdlib"]
    # The static FoundationNetworking asks the linker for -lcurl, which needs libcurl.so; without the -dev
    # package only libcurl.so.4 exists: point the linker at a directory with that link.
    link_dir = os.path.join(tempfile.gettempdir(), "resumable-bench-curl-link")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "libcurl.so")
    for candidate in ("/usr/lib/x86_64-linux-gnu/libcurl.so.4", "/usr/lib/aarch64-linux-gnu/libcurl.so.4"):
        if os.path.exists(candidate) and not os.path.lexists(link):
            os.symlink(candidate, link)
    command += ["-Xlinker", "-L" + link_dir]
    if scratch:
        command += ["--scratch-path", scratch]
    print("Building the release binary …", file=sys.stderr, flush=True)
    for attempt in range(5):
        if subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL).returncode == 0:
            break
        if attempt == 4:
            raise SystemExit("swift build failed")
        print("build failed; retrying in 60 s", file=sys.stderr, flush=True)
        time.sleep(60)
    bin_dir = subprocess.run(command + ["--show-bin-path"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.strip()
    return os.path.join(bin_dir, "resumable")


class Nginx:
    """nginx on a free loopback port serving `root` three ways:

    - `/limited/NAME`: `limit_rate RATE` per connection, with `sendfile_max_chunk MAX_CHUNK` (see below);
    - `/perip/NAME`: the same, and at most 4 connections per client address (`limit_conn`, 503 beyond);
      logged to `perip.log` (status per request);
    - `/burst/NAME`: `limit_rate RATE` with nginx's own `sendfile_max_chunk` (2 MiB), for the ramp of section 4;
    - `/NAME`: unthrottled.

    nginx paces a throttled response by sending a chunk, then waiting chunk / rate: every request (every range
    request of a multi-connection client) gets its first chunk free. That chunk is at most `sendfile_max_chunk`,
    2 MiB by default: a quarter of a second at 8 MiB/s, per request, which would put the physical limit
    size / (n x rate) far from what a client can reach. 256 KiB (the default here) keeps the head start at 1/32 s
    per request; `--max-chunk 0` keeps nginx's default.
    """

    def __init__(self, root, rate, workers, max_chunk):
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if not nginx:
            raise SystemExit("nginx is needed (Debian package nginx-light)")
        self.work = tempfile.mkdtemp(prefix="resumable-segments-nginx-")
        self.perip_log = os.path.join(self.work, "perip.log")
        chunk = f" sendfile_max_chunk {max_chunk};" if max_chunk not in ("", "0") else ""
        for _ in range(5):
            self.port = free_port()
            config = os.path.join(self.work, "nginx.conf")
            with open(config, "w") as f:
                f.write(f"""
daemon off; master_process {"on" if workers > 1 else "off"}; worker_processes {workers}; pid {self.work}/nginx.pid;
error_log {self.work}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path {self.work}/body; proxy_temp_path {self.work}/proxy;
  fastcgi_temp_path {self.work}/fastcgi; uwsgi_temp_path {self.work}/uwsgi; scgi_temp_path {self.work}/scgi;
  limit_conn_zone $binary_remote_addr zone=perip:1m;
  log_format status '$status $http_range';
  server {{
    listen 127.0.0.1:{self.port} backlog=512;
    root {root};
    location /limited/ {{ alias {root}/; limit_rate {rate};{chunk} }}
    location /burst/ {{ alias {root}/; limit_rate {rate}; }}
    location /perip/ {{
      alias {root}/; limit_rate {rate};{chunk}
      limit_conn perip 4;
      access_log {self.perip_log} status;
    }}
  }}
}}
""")
            self.process = subprocess.Popen([nginx, "-p", self.work, "-c", config, "-e", f"{self.work}/error.log"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                        return
                except OSError:
                    time.sleep(0.05)
            self.stop(remove=False)
        raise RuntimeError("could not start nginx")

    def url(self, name, kind=""):
        prefix = f"/{kind}" if kind else ""
        return f"http://127.0.0.1:{self.port}{prefix}/{name}"

    def perip_statuses(self):
        """The statuses logged for /perip/ so far, in order."""
        try:
            with open(self.perip_log) as f:
                return [line.split(" ", 1)[0] for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def stop(self, remove=True):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if remove:
            shutil.rmtree(self.work, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------------
# Running


def same_file(path, reference):
    return os.path.isfile(path) and subprocess.run(["cmp", "-s", path, reference]).returncode == 0


def timed(name, command, output, reference):
    """Runs `command` under GNU time in a clean output directory, checks its file; returns (wall, cpu, rss)."""
    clear(os.path.dirname(output))
    subprocess.run(["sync"])
    status, wall, cpu, rss, _ = run(command)
    if status != 0:
        raise SystemExit(f"{name} failed (exit status {status})")
    if not same_file(output, reference):
        raise SystemExit(f"{name} wrote a wrong file: {output} differs from {reference}")
    return wall, cpu, rss


def run_events(command):
    """Runs a `resumable ... --json` command under GNU time, timestamping each stderr line as it arrives.

    Returns (exit status, wall seconds, cpu seconds, peak RSS MiB, [(t, event)], final result or None).
    """
    time_tool = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
    wrapped = ([time_tool, "-f", "@@rusage %M %U %S"] + command) if time_tool else command
    start = time.monotonic()
    process = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    events, other = [], []
    cpu = rss = float("nan")
    for raw in process.stderr:  # line by line, as the process writes them
        t = time.monotonic() - start
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith("@@rusage "):
            _, maxrss, user, system = line.split()
            rss, cpu = int(maxrss) / 1024, float(user) + float(system)
            continue
        try:
            events.append((t, json.loads(line)))
        except ValueError:
            other.append(line)
    stdout = process.stdout.read()
    status = process.wait()
    wall = time.monotonic() - start
    if status != 0:
        sys.stderr.write(f"command failed ({status}): {' '.join(command)}\n" + "\n".join(other[-20:]) + "\n")
    try:
        result = json.loads(stdout)
    except ValueError:
        result = None
    return status, wall, cpu, rss, events, result


def rounds_of(variants, rounds, warmup):
    """Runs `variants` ({name: callable returning a row}) alternately; returns {name: [rows]} without the warm-up."""
    names = list(variants)
    results = {name: [] for name in names}
    total = rounds + (1 if warmup else 0)
    for index in range(total):
        order = names if index % 2 == 0 else list(reversed(names))
        measured = index > 0 or not warmup
        print(f"  round {index + 1}/{total}{'' if measured else ' (warm-up)'} …", file=sys.stderr, flush=True)
        for name in order:
            row = variants[name]()
            if measured:
                results[name].append(row)
    return results


def med(rows, column):
    return statistics.median(r[column] for r in rows)


def fmt_s(seconds):
    return f"{seconds:.2f} s"


def load_note():
    return f"(load average {os.getloadavg()[0]:.2f} now.)"


def verdict(ok):
    return "**met**" if ok else "**missed**"


# ----------------------------------------------------------------------------------------------------------------
# Sections


def section_throttled(resumable, server, files, out, size, rate, rounds, warmup, report):
    reference = os.path.join(files, FILE_NAME)
    url = server.url(FILE_NAME, "limited")
    target = os.path.join(out, FILE_NAME)

    def ours(connections):
        command = [resumable, "get", url, "-o", out + "/", "--quiet", "--overwrite", "--connections", connections]
        return lambda: timed(f"resumable --connections {connections}", command, target, reference)

    def aria(n):
        command = ["aria2c", f"-x{n}", f"-s{n}", "-k1M", "--allow-overwrite=true", "--auto-file-renaming=false",
                   "-q", "-d", out, url]
        return lambda: timed(f"aria2c -x{n}", command, target, reference)

    axel = ["axel", "-n", "4", "-q", "-o", target, url]
    variants = {}
    limits = {}
    for n in ("1", "4", "8", "16", "auto"):
        variants[f"resumable --connections {n}"] = ours(n)
        limits[f"resumable --connections {n}"] = 16 if n == "auto" else int(n)
    skipped = []
    if shutil.which("aria2c"):
        variants["aria2c -x4 -s4 -k1M"] = aria(4)
        limits["aria2c -x4 -s4 -k1M"] = 4
    else:
        skipped.append("aria2c")
    if shutil.which("axel"):
        variants["axel -n 4"] = lambda: timed("axel -n 4", axel, target, reference)
        limits["axel -n 4"] = 4
    else:
        skipped.append("axel")
    if shutil.which("aria2c"):
        variants["aria2c -x16 -s16 -k1M"] = aria(16)
        limits["aria2c -x16 -s16 -k1M"] = 16

    print(f"\n## 1. {human(size)} served at {human(rate)}/s per connection (`limit_rate`), into tmpfs\n", flush=True)
    if skipped:
        print(f"(not installed, skipped: {', '.join(skipped)})\n")
    results = rounds_of(variants, rounds, warmup)
    single = med(results["resumable --connections 1"], 0)
    rows = {}
    print(f"Medians of {rounds} alternating round{'s' if rounds != 1 else ''}"
          f"{' after a warm-up round' if warmup else ''}; physical limit = size / (n × rate).\n")
    print("| command | wall | min – max | speed-up vs 1 | physical limit (n) | wall ÷ limit | CPU | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        wall, cpu, rss = med(runs, 0), med(runs, 1), max(r[2] for r in runs)
        n = limits[name]
        limit = size / (n * rate)
        rows[name] = {"wall": wall, "walls": [r[0] for r in runs], "cpu": cpu, "rssMiB": rss, "n": n,
                      "limit": limit, "speedup": single / wall, "toLimit": wall / limit}
        print(f"| `{name}` | {fmt_s(wall)} | {min(r[0] for r in runs):.2f} – {max(r[0] for r in runs):.2f} | "
              f"{single / wall:.2f}× | {fmt_s(limit)} ({n}{' max' if name.endswith('auto') else ''}) | "
              f"{wall / limit:.3f} | {fmt_s(cpu)} | {rss:.1f} MiB |")
    report["throttled"] = {"size": size, "rate": rate, "rounds": rounds, "rows": rows}
    auto_walls = ", ".join(f"{w:.2f}" for w in rows["resumable --connections auto"]["walls"])
    print(f"\n`--connections auto`, each round: {auto_walls} s.")

    four = rows["resumable --connections 4"]
    print("\nGoals:\n")
    print(f"- `--connections 4` ≥ 3.6× faster than 1: {four['speedup']:.2f}× — {verdict(four['speedup'] >= 3.6)}")
    print(f"- `--connections 4` within 5 % of the physical limit: {four['toLimit']:.3f}× the limit — "
          f"{verdict(four['toLimit'] <= 1.05)}")
    for peer in ("aria2c -x4 -s4 -k1M", "axel -n 4"):
        if peer in rows:
            ratio = four["wall"] / rows[peer]["wall"]
            print(f"- `--connections 4` no slower than `{peer}`: {four['wall']:.2f} s vs {rows[peer]['wall']:.2f} s "
                  f"({ratio:.3f}×) — {verdict(ratio <= 1.0)}")
    if "aria2c -x16 -s16 -k1M" in rows:
        auto = rows["resumable --connections auto"]
        fraction = rows["aria2c -x16 -s16 -k1M"]["wall"] / auto["wall"]
        report["throttled"]["autoVsAria16"] = fraction
        print(f"- `auto` throughput ≥ 90 % of `aria2c -x16`: {size / auto['wall'] / MiB:.1f} MiB/s vs "
              f"{size / rows['aria2c -x16 -s16 -k1M']['wall'] / MiB:.1f} MiB/s = {fraction * 100:.1f} % — "
              f"{verdict(fraction >= 0.9)}")
    print(f"\n{load_note()}")


def peak_connections(events):
    return max((e.get("connections", 0) for _, e in events if e.get("event") == "progress"), default=0)


def section_limited_conn(resumable, server, files, out, size, rate, rounds, report):
    """`auto` (the brief's case), and `--connections 8` (twice the limit) so that the back-off is exercised even
    when `auto` does not reach the limit on its own."""
    reference = os.path.join(files, FILE_NAME)
    url = server.url(FILE_NAME, "perip")
    target = os.path.join(out, FILE_NAME)
    limit = size / (4 * rate)
    print(f"\n## 2. Against a server allowing 4 connections per client (`limit_conn perip 4;`, "
          f"`limit_rate {human(rate)}/s`), {human(size)}\n", flush=True)
    print(f"Physical limit with 4 connections: {fmt_s(limit)}. Alternating runs; nginx's statuses from its access "
          f"log of that location.\n")
    print("| command | run | wall | wall ÷ limit(4) | file correct | peak `connections` | `segment` events | "
          "`segment-failed` events | `retry` events | nginx 503s | exit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    kinds = ["auto", "8"]
    runs = {kind: [] for kind in kinds}
    for index in range(rounds):
        for kind in (kinds if index % 2 == 0 else list(reversed(kinds))):
            command = [resumable, "get", url, "-o", out + "/", "--json", "--overwrite", "--connections", kind]
            clear(out)
            subprocess.run(["sync"])
            before = len(server.perip_statuses())
            status, wall, cpu, rss, events, result = run_events(command)
            statuses = server.perip_statuses()[before:]
            correct = status == 0 and same_file(target, reference)
            row = {
                "wall": wall, "correct": correct, "exit": status, "cpu": cpu, "rssMiB": rss,
                "peakConnections": peak_connections(events),
                "segments": sum(1 for _, e in events if e.get("event") == "segment"),
                "segmentFailed": sum(1 for _, e in events if e.get("event") == "segment-failed"),
                "retries": sum(1 for _, e in events if e.get("event") == "retry"),
                "status503": statuses.count("503"), "requests": len(statuses),
            }
            runs[kind].append(row)
    for kind in kinds:
        for index, row in enumerate(runs[kind]):
            print(f"| `--connections {kind}` | {index + 1} | {fmt_s(row['wall'])} | {row['wall'] / limit:.3f} | "
                  f"{'yes' if row['correct'] else '**NO**'} | {row['peakConnections']} | {row['segments']} | "
                  f"{row['segmentFailed']} | {row['retries']} | {row['status503']} of {row['requests']} requests | "
                  f"{row['exit']} |")
    print()
    summary = {}
    for kind in kinds:
        wall = statistics.median(r["wall"] for r in runs[kind])
        summary[kind] = {"medianWall": wall, "runs": runs[kind]}
        print(f"- `--connections {kind}`: median wall {fmt_s(wall)} ({wall / limit:.3f}× the 4-connection limit), "
              f"files correct: {sum(r['correct'] for r in runs[kind])} of {len(runs[kind])}.")
    print(f"\n{load_note()}")
    report["perClientLimit"] = {"size": size, "rate": rate, "limit4": limit, "commands": summary}
    if not all(r["correct"] for kind in kinds for r in runs[kind]):
        raise SystemExit("a download against limit_conn did not produce the right file")


def section_unthrottled(resumable, server, files, outs, size, rounds, warmup, report):
    reference = os.path.join(files, BIG_NAME)
    url = server.url(BIG_NAME)
    print(f"\n## 3. {human(size)} unthrottled: one connection against `auto` and four, without and with `--sha256`\n",
          flush=True)
    print("Computing the SHA-256 of the test file …", file=sys.stderr, flush=True)
    digest = hashlib.sha256()
    with open(reference, "rb") as f:
        for chunk in iter(lambda: f.read(8 * MiB), b""):
            digest.update(chunk)
    hex_digest = digest.hexdigest()
    report["unthrottled"] = {"size": size, "rounds": rounds, "targets": {}}
    for label, out in outs:
        os.makedirs(out, exist_ok=True)
        target = os.path.join(out, BIG_NAME)

        def ours(connections, sha):
            command = [resumable, "get", url, "-o", out + "/", "--quiet", "--overwrite", "--connections", connections]
            if sha:
                command += ["--sha256", hex_digest]
            name = f"--connections {connections}{' --sha256' if sha else ''}"
            return lambda: timed(name, command, target, reference)

        variants = {
            "--connections 1": ours("1", False),
            "--connections auto": ours("auto", False),
            "--connections 4": ours("4", False),
            "--connections 1 --sha256": ours("1", True),
            "--connections auto --sha256": ours("auto", True),
            "--connections 4 --sha256": ours("4", True),
        }
        print(f"Into {label} ({out}) …", file=sys.stderr, flush=True)
        results = rounds_of(variants, rounds, warmup)
        rows = {name: {"wall": med(r, 0), "walls": [x[0] for x in r], "cpu": med(r, 1),
                       "rssMiB": max(x[2] for x in r)} for name, r in results.items()}
        report["unthrottled"]["targets"][label] = rows
        print(f"### Into {label}: medians of {rounds} alternating round{'s' if rounds != 1 else ''}"
              f"{' after a warm-up round' if warmup else ''}\n")
        print("| command | wall | min – max | CPU | peak RSS |")
        print("| --- | --- | --- | --- | --- |")
        for name, row in rows.items():
            print(f"| `resumable get {name}` | {fmt_s(row['wall'])} | {min(row['walls']):.2f} – "
                  f"{max(row['walls']):.2f} | {fmt_s(row['cpu'])} | {row['rssMiB']:.1f} MiB |")
        one, auto = rows["--connections 1"], rows["--connections auto"]
        sha1, sha_auto = rows["--connections 1 --sha256"], rows["--connections auto --sha256"]
        print("\nGoals:\n")
        print(f"- `auto` ≤ 1.05× one connection: {auto['wall'] / one['wall']:.3f}× — "
              f"{verdict(auto['wall'] / one['wall'] <= 1.05)}")
        worst = max(r["rssMiB"] for r in rows.values())
        print(f"- peak RSS ≤ 64 MiB: one connection {one['rssMiB']:.1f} MiB, `auto` {auto['rssMiB']:.1f} MiB "
              f"(with `--sha256`: {sha1['rssMiB']:.1f} / {sha_auto['rssMiB']:.1f} MiB) — {verdict(worst <= 64)}")
        four, sha4 = rows["--connections 4"], rows["--connections 4 --sha256"]
        ratios = [sha1["wall"] / one["wall"], sha_auto["wall"] / auto["wall"], sha4["wall"] / four["wall"]]
        print(f"- `--sha256` ≤ 1.15× without: one connection {ratios[0]:.3f}×, `auto` {ratios[1]:.3f}×, four "
              f"{ratios[2]:.3f}× — {verdict(max(ratios) <= 1.15)}\n")
        print(f"{load_note()}\n")
        clear(out)


def ramp_runs(resumable, url, reference, out, count):
    command = [resumable, "get", url, "-o", out + "/", "--json", "--overwrite", "--connections", "auto"]
    target = os.path.join(out, FILE_NAME)
    runs = []
    for _ in range(count):
        clear(out)
        subprocess.run(["sync"])
        status, wall, cpu, rss, events, result = run_events(command)
        if status != 0 or not same_file(target, reference):
            raise SystemExit("auto (ramp run) failed or wrote a wrong file")
        curve = []  # (t, connections, MiB on disk, segments started so far) whenever the count changes
        started_segments = 0
        for t, event in events:
            if event.get("event") == "segment":
                started_segments += 1
            if event.get("event") != "progress":
                continue
            count_now = event.get("connections", 0)
            if not curve or curve[-1][1] != count_now:
                curve.append((t, count_now, event.get("bytesOnDisk", 0) / MiB, started_segments))
        peak = max((c for _, c, _, _ in curve), default=0)
        first_peak = next(((t, mib) for t, c, mib, _ in curve if c == peak), (float("nan"), 0))
        segments = [(t, e) for t, e in events if e.get("event") == "segment"]
        started = next((t for t, e in events if e.get("event") == "started"), None)
        runs.append({"wall": wall, "curve": curve, "peak": peak, "timeToPeak": first_peak[0],
                     "mibAtPeak": first_peak[1], "segments": len(segments), "startedAt": started,
                     "lastSegmentAt": segments[-1][0] if segments else None,
                     "segmentFailed": sum(1 for _, e in events if e.get("event") == "segment-failed")})
    return runs


def print_ramp(title, runs):
    median_run = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    print(f"### {title}\n")
    print(f"The median run of {len(runs)} ({fmt_s(median_run['wall'])}): each change of the `connections` count "
          f"in the progress events (t = when its line arrived, from process start).\n")
    print("| t | connections | MiB on disk | `segment` events so far |")
    print("| --- | --- | --- | --- |")
    for t, count, mib, segments in median_run["curve"]:
        print(f"| {t:.2f} s | {count} | {mib:.1f} | {segments} |")
    print()
    print("| run | wall | `started` event at | peak count | time to peak | MiB on disk at peak | segments started | "
          "last segment started at | `segment-failed` |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for index, r in enumerate(runs):
        last = f"{r['lastSegmentAt']:.2f} s" if r["lastSegmentAt"] is not None else "–"
        started = f"{r['startedAt']:.2f} s" if r["startedAt"] is not None else "–"
        print(f"| {index + 1} | {fmt_s(r['wall'])} | {started} | {r['peak']} | {r['timeToPeak']:.2f} s | "
              f"{r['mibAtPeak']:.1f} | {r['segments']} | {last} | {r['segmentFailed']} |")
    print()


def section_ramp(resumable, server, files, out, size, rate, rounds, max_chunk, report):
    reference = os.path.join(files, FILE_NAME)
    print(f"\n## 4. The ramp of `auto`: {human(size)} at {human(rate)}/s per connection\n", flush=True)
    print(f"(16 connections from the first byte would take {fmt_s(size / (16 * rate))}.)\n")
    report["ramp"] = {"size": size, "rate": rate}
    paced = ramp_runs(resumable, server.url(FILE_NAME, "limited"), reference, out, rounds)
    report["ramp"]["limited"] = paced
    print_ramp(f"nginx `limit_rate`, `sendfile_max_chunk {max_chunk}` (the server of section 1)", paced)
    burst = ramp_runs(resumable, server.url(FILE_NAME, "burst"), reference, out, rounds)
    report["ramp"]["burst"] = burst
    print(load_note() + "\n")
    print_ramp("nginx `limit_rate` with its own `sendfile_max_chunk` (2 MiB): a 2 MiB chunk, then a 1/4 s pause",
               burst)


# ----------------------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="100M", help="the throttled file (default 100M)")
    parser.add_argument("--big", default="1G", help="the unthrottled file of section 3 (default 1G)")
    parser.add_argument("--rate", default="8m", help="nginx limit_rate per connection (default 8m = 8 MiB/s)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--ramp-runs", type=int, default=3, help="runs of section 4 (default 3)")
    parser.add_argument("--no-warmup", action="store_true", help="no warm-up round before sections 1 and 3")
    parser.add_argument("--quick", action="store_true",
                        help="CI: 16 MiB throttled, 64 MiB unthrottled, 1 round, no warm-up, disk only")
    parser.add_argument("--only", default="1,2,3,4", help="comma-separated sections to run (default 1,2,3,4)")
    parser.add_argument("--max-chunk", default="256k",
                        help="nginx sendfile_max_chunk of the throttled locations (default 256k; 0: nginx's own, 2m)")
    parser.add_argument("--nginx-workers", type=int, default=1, help="nginx worker processes (default 1)")
    parser.add_argument("--disk-dir", default=os.path.join(ROOT, ".build", "bench-segments-disk"),
                        help="the on-disk output directory of section 3")
    parser.add_argument("--scratch-path", help="build into this --scratch-path instead of .build")
    parser.add_argument("--resumable", help="use this resumable binary instead of building one")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.size, args.big, args.rounds, args.ramp_runs, args.no_warmup = "16M", "64M", 1, 1, True
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    size, big = parse_size(args.size), parse_size(args.big)
    rate_text = args.rate.strip().lower()
    rate = parse_size(rate_text)  # nginx's k and m are 1024 and 1024², as parse_size's
    warmup = not args.no_warmup

    resumable = os.path.abspath(args.resumable) if args.resumable else build(args.scratch_path)
    files = tempfile.mkdtemp(prefix="resumable-segments-files-",
                             dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    tmpfs = tempfile.mkdtemp(prefix="resumable-segments-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    throttled_out = os.path.join(tmpfs or files, "out")
    os.makedirs(throttled_out, exist_ok=True)
    report = {"machine": machine(), "sections": sorted(sections)}
    server = None
    try:
        needed = ([size] if sections & {"1", "2", "4"} else []) + ([big] if "3" in sections else [])
        print(f"Creating {', '.join(human(s) for s in needed)} of random test data …", file=sys.stderr, flush=True)
        if sections & {"1", "2", "4"}:
            make_file(os.path.join(files, FILE_NAME), size)
        if "3" in sections:
            make_file(os.path.join(files, BIG_NAME), big)
        server = Nginx(files, rate_text, args.nginx_workers, args.max_chunk.strip().lower())
        versions = [subprocess.run(c, capture_output=True, text=True) for c in
                    (["nginx", "-v"], ["aria2c", "--version"], ["axel", "--version"])
                    if shutil.which(c[0])]
        print("# Several connections: `resumable get --connections`\n")
        m = report["machine"]
        memory = m.get("memory", "?")
        if memory.endswith(" kB"):
            memory = f"{int(memory[:-3]) / (1 << 20):.0f} GiB"
        print(f"Machine: {m.get('cores')} cores ({m.get('cpu', '?')}), {memory}, Linux "
              f"{m.get('kernel')}; load average {os.getloadavg()[0]:.2f}. nginx on 127.0.0.1:{server.port} "
              f"({args.nginx_workers} worker; throttled locations: "
              f"`limit_rate {rate_text}; sendfile_max_chunk {args.max_chunk};`); "
              + "; ".join((v.stdout or v.stderr).splitlines()[0].strip() for v in versions) + ".")
        if "1" in sections:
            section_throttled(resumable, server, files, throttled_out, size, rate, args.rounds, warmup, report)
        if "2" in sections:
            section_limited_conn(resumable, server, files, throttled_out, size, rate, args.rounds, report)
        if "3" in sections:
            outs = [("the disk", args.disk_dir)]
            if tmpfs and not args.quick:
                outs.append(("tmpfs", os.path.join(tmpfs, "big")))
            section_unthrottled(resumable, server, files, outs, big, args.rounds, warmup, report)
        if "4" in sections:
            section_ramp(resumable, server, files, throttled_out, size, rate, args.ramp_runs, args.max_chunk, report)
    finally:
        if server:
            server.stop()
        shutil.rmtree(files, ignore_errors=True)
        if tmpfs:
            shutil.rmtree(tmpfs, ignore_errors=True)
        shutil.rmtree(args.disk_dir, ignore_errors=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    print("\nbenchmark finished")


if __name__ == "__main__":
    main()

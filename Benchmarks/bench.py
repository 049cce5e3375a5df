#!/usr/bin/env python3
"""Resumable against curl on one connection: wall time, CPU time and peak memory.

Starts nginx on a free 127.0.0.1 port with a config it writes (or `resumable serve` when nginx is absent,
saying so), creates the test files, and runs `resumable get` and `curl -o` alternately into a tmpfs
directory and onto the disk, after a warm-up. Prints medians and ratios against curl from the same run.
Then measures the cost of checkpointing the token once a second, peak memory for several sizes and with
an artificially slow writer (backpressure), peak memory of 8 downloads at once in one process on each
transport, and the pause -> resume round trip.

    python3 Benchmarks/bench.py                   # 1 GiB, 5 pairs, plus 4 GiB memory runs
    python3 Benchmarks/bench.py --size 64M --pairs 1 --quick    # what CI runs: keeps the benchmark working
    python3 Benchmarks/bench.py --only concurrent # only the 8-downloads-at-once memory runs (256 MiB each)

Only loopback traffic. CPU time and peak RSS come from wait4()'s rusage of each child process.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.0f} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    return f"{n} B"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(command, **kwargs):
    """Runs a command; returns (exit status, wall seconds, user+sys seconds, peak RSS in MiB, stdout).

    CPU time and peak RSS come from GNU time (`/usr/bin/time`), whose small process forks the command: the
    rusage of a child forked straight from Python would count Python's own pages in the peak RSS.
    """
    time_tool = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
    wrapped = ([time_tool, "-f", "@@rusage %M %U %S"] + command) if time_tool else command
    start = time.monotonic()
    process = subprocess.run(wrapped, capture_output=True, **kwargs)
    wall = time.monotonic() - start
    err = process.stderr.decode(errors="replace")
    cpu, rss = float("nan"), float("nan")
    for line in err.splitlines():
        if line.startswith("@@rusage "):
            _, maxrss, user, system = line.split()
            rss, cpu = int(maxrss) / 1024, float(user) + float(system)
    status = process.returncode
    if time_tool and "Command exited with non-zero status" in err:
        status = status or 1
    if status != 0:
        sys.stderr.write(f"command failed ({status}): {' '.join(command)}\n{err}\n")
    return status, wall, cpu, rss, process.stdout


def build(scratch):
    """Release builds of `resumable` and TransportThroughput; `scratch` is a --scratch-path prefix or None."""
    print("Building release binaries …", flush=True)

    def swift_build(*extra, scratch_suffix):
        command = ["swift", "build", "-c", "release"] + list(extra)
        if scratch:
            command += ["--scratch-path", scratch + scratch_suffix]
        return command

    main = swift_build("--product", "resumable", scratch_suffix="")
    bench = swift_build("--package-path", "Benchmarks/TransportThroughput", scratch_suffix="-throughput")
    subprocess.run(main, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(bench, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    bin_dir = subprocess.run(main + ["--show-bin-path"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.strip()
    tt_dir = subprocess.run(bench + ["--show-bin-path"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.strip()
    return os.path.join(bin_dir, "resumable"), os.path.join(tt_dir, "TransportThroughput")


class Server:
    """nginx on a free loopback port, or `resumable serve` when nginx is missing."""

    def __init__(self, root, resumable):
        self.root = root
        self.work = tempfile.mkdtemp(prefix="resumable-bench-nginx-")
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        for _ in range(5):
            self.port = free_port()
            if nginx:
                self.kind = "nginx"
                config = os.path.join(self.work, "nginx.conf")
                with open(config, "w") as f:
                    f.write(f"""
daemon off; master_process off; worker_processes 1; pid {self.work}/nginx.pid;
error_log {self.work}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path {self.work}/body; proxy_temp_path {self.work}/proxy;
  fastcgi_temp_path {self.work}/fastcgi; uwsgi_temp_path {self.work}/uwsgi; scgi_temp_path {self.work}/scgi;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
    location /slow/ {{ alias {root}/; limit_rate 16m; }}
  }}
}}
""")
                command = [nginx, "-p", self.work, "-c", config, "-e", f"{self.work}/error.log"]
            else:
                self.kind = "resumable serve (nginx not installed)"
                command = [resumable, "serve", root, "--port", str(self.port)]
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                        return
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("could not start a server")

    def url(self, name, slow=False):
        if slow and self.kind == "nginx":
            return f"http://127.0.0.1:{self.port}/slow/{name}"
        return f"http://127.0.0.1:{self.port}/{name}"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def make_file(path, size):
    with open("/dev/urandom", "rb") as source, open(path, "wb") as target:
        remaining = size
        while remaining:
            chunk = source.read(min(remaining, 8 << 20))
            target.write(chunk)
            remaining -= len(chunk)


def clear(directory):
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            os.unlink(path)


def median_row(rows):
    return (statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows), max(r[3] for r in rows))


def compare(label, directory, url, resumable, pairs):
    """`resumable get` and `curl -o` alternately into `directory`; returns a dict of medians and ratios."""
    os.makedirs(directory, exist_ok=True)
    commands = {
        "curl": ["curl", "-s", "-o", os.path.join(directory, "curl.bin"), url],
        "resumable": [resumable, "get", url, "-o", directory + "/", "--quiet", "--overwrite"],
    }
    results = {"curl": [], "resumable": []}
    for index in range(pairs + 1):  # the first pair is the warm-up
        order = ["curl", "resumable"] if index % 2 == 0 else ["resumable", "curl"]
        for name in order:
            clear(directory)
            subprocess.run(["sync"])
            row = run(commands[name])
            if row[0] != 0:
                raise SystemExit(f"{name} failed")
            if index > 0:
                results[name].append(row)
    clear(directory)
    curl = median_row(results["curl"])
    ours = median_row(results["resumable"])
    return {
        "label": label, "pairs": pairs,
        "curl": {"wall": curl[0], "cpu": curl[1], "rssMiB": curl[2]},
        "resumable": {"wall": ours[0], "cpu": ours[1], "rssMiB": ours[2]},
        "wallRatio": ours[0] / curl[0], "cpuRatio": ours[1] / curl[1],
    }


def library_runs(throughput, url, directory, variants, repeats):
    """TransportThroughput variants alternately; returns {name: (median wall, median cpu, max rss)}."""
    os.makedirs(directory, exist_ok=True)
    results = {name: [] for name in variants}
    for index in range(repeats + 1):
        for name, extra in variants.items():
            clear(directory)
            subprocess.run(["sync"])
            row = run([throughput, url, directory] + extra)
            if row[0] != 0:
                raise SystemExit(f"{name} failed")
            if index > 0 or repeats == 0:
                results[name].append(row)
    clear(directory)
    return {name: median_row(rows) for name, rows in results.items()}


def concurrent_memory(throughput, url, directory, count, slow_rate):
    """`count` downloads of `url` at once in one process (TransportThroughput --concurrent), on each transport,
    with the writer at full speed and slowed to `slow_rate` bytes per second per download.

    Returns {"<transport> <writer>": {"rssMiB", "wall", "cpu"}}.
    """
    variants = {}
    for transport in ("libcurl", "urlSession"):
        base = ["--transport", transport, "--concurrent", str(count)]
        variants[f"{transport} full-speed writer"] = base
        variants[f"{transport} slow writer"] = base + ["--slow-writer", str(slow_rate)]
    results = library_runs(throughput, url, directory, variants, 0)
    return {name: {"rssMiB": rss, "wall": wall, "cpu": cpu} for name, (wall, cpu, rss) in results.items()}


def round_trip(resumable, url, directory):
    """Pause with SIGINT, then time a new process from start to its first byte appended."""
    os.makedirs(directory, exist_ok=True)
    clear(directory)
    token = os.path.join(directory, "rt.token.json")
    first = subprocess.Popen([resumable, "get", url, "-o", directory + "/", "--token", token, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in first.stderr:
        event = json.loads(line)
        if event.get("event") == "progress" and event.get("bytesOnDisk", 0) >= (4 << 20):
            break
    pause_start = time.monotonic()
    first.send_signal(signal.SIGINT)
    first.communicate()
    pause_ms = (time.monotonic() - pause_start) * 1000
    offset = json.load(open(token))["offset"]
    start = time.monotonic()
    second = subprocess.Popen([resumable, "resume", token, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    first_byte_ms = None
    for line in second.stderr:
        event = json.loads(line)
        if event.get("event") == "progress" and event.get("bytesOnDisk", 0) > offset:
            first_byte_ms = (time.monotonic() - start) * 1000
            break
    second.send_signal(signal.SIGINT)
    second.communicate()
    clear(directory)
    return pause_ms, first_byte_ms, offset


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1G", help="file size for the curl comparison (default 1G)")
    parser.add_argument("--pairs", type=int, default=5, help="measured pairs after one warm-up (default 5)")
    parser.add_argument("--quick", action="store_true", help="skip the 4 GiB memory run (CI)")
    parser.add_argument("--disk-dir", default=os.path.join(ROOT, ".build", "bench-disk"))
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--concurrent", type=int, default=8,
                        help="downloads at once for the concurrent memory runs (default 8)")
    parser.add_argument("--only", choices=["concurrent"],
                        help="run only this part: `concurrent`, the downloads-at-once memory runs")
    parser.add_argument("--scratch-path", help="build into this --scratch-path (and PATH-throughput) instead of .build")
    args = parser.parse_args()
    size = parse_size(args.size)
    only_concurrent = args.only == "concurrent"

    resumable, throughput = build(args.scratch_path)
    files = tempfile.mkdtemp(prefix="resumable-bench-files-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    tmpfs = tempfile.mkdtemp(prefix="resumable-bench-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
    sizes = sorted({size, min(size, 256 << 20)} | (set() if args.quick or only_concurrent else {4 << 30}))
    if only_concurrent:
        sizes = [min(size, 256 << 20)]
    print(f"Creating {', '.join(human(s) for s in sizes)} of random test data …", flush=True)
    for s in sizes:
        make_file(os.path.join(files, f"{s}.bin"), s)
    server = Server(files, resumable)
    report = {"machine": machine(), "server": server.kind, "size": size}
    try:
        if only_concurrent:
            print(f"Server: {server.kind} on 127.0.0.1:{server.port}")
            report["concurrent"] = concurrent_section(throughput, server, args.disk_dir, sizes[0], args.concurrent)
            return
        url = server.url(f"{size}.bin")
        print(f"Server: {server.kind} on 127.0.0.1:{server.port}; file {human(size)}; {args.pairs} pairs after a warm-up\n")
        rows = []
        if tmpfs:
            rows.append(compare("tmpfs", tmpfs, url, resumable, args.pairs))
        rows.append(compare("disk", args.disk_dir, url, resumable, args.pairs))
        report["comparison"] = rows
        print(f"{'into':6} {'curl wall':>10} {'ours wall':>10} {'ratio':>6}   {'curl cpu':>9} {'ours cpu':>9} {'ratio':>6}   "
              f"{'curl RSS':>9} {'ours RSS':>9}")
        for r in rows:
            print(f"{r['label']:6} {r['curl']['wall']:9.2f}s {r['resumable']['wall']:9.2f}s {r['wallRatio']:6.2f}   "
                  f"{r['curl']['cpu']:8.2f}s {r['resumable']['cpu']:8.2f}s {r['cpuRatio']:6.2f}   "
                  f"{r['curl']['rssMiB']:6.1f}MiB {r['resumable']['rssMiB']:6.1f}MiB")

        print("\nCheckpointing the token once a second (library, libcurl, onto the disk):")
        checkpoint = library_runs(throughput, url, args.disk_dir, {
            "without": ["--transport", "libcurl"],
            "with": ["--transport", "libcurl", "--checkpoint-ms", "1000"],
        }, args.pairs)
        cost = checkpoint["with"][0] / checkpoint["without"][0] - 1
        report["checkpoint"] = {"withoutWall": checkpoint["without"][0], "withWall": checkpoint["with"][0],
                                "cost": cost}
        print(f"  without {checkpoint['without'][0]:.2f}s, with {checkpoint['with'][0]:.2f}s: {cost * 100:+.1f}% wall time")

        print("\nPeak RSS (library, onto the disk):")
        memory = {}
        for s in (x for x in sizes if x >= size):
            variants = {"libcurl": ["--transport", "libcurl"], "urlSession": ["--transport", "urlSession"]}
            result = library_runs(throughput, server.url(f"{s}.bin"), args.disk_dir, variants, 0)
            for name, (wall, cpu, rss) in result.items():
                memory[f"{name} {human(s)}"] = rss
                print(f"  {name:10} {human(s):>8}: {rss:6.1f} MiB  ({wall:.2f}s wall, {cpu:.2f}s cpu)")
        slow_size = min(size, 256 << 20)
        slow_rate = max(slow_size // 4, 1 << 20)  # about four seconds
        slowed = library_runs(throughput, server.url(f"{slow_size}.bin"), args.disk_dir, {
            "libcurl": ["--transport", "libcurl", "--slow-writer", str(slow_rate)],
            "urlSession": ["--transport", "urlSession", "--slow-writer", str(slow_rate)],
        }, 0)
        for name, (wall, cpu, rss) in slowed.items():
            memory[f"{name} slow writer"] = rss
            print(f"  {name:10} with a writer slowed to {human(slow_rate)}/s: {rss:6.1f} MiB  ({wall:.2f}s wall)")
        report["memoryMiB"] = memory
        report["concurrent"] = concurrent_section(throughput, server, args.disk_dir, slow_size, args.concurrent)

        print("\nPause -> resume round trip (a file served at 16 MiB/s):")
        pause_ms, first_byte_ms, offset = round_trip(resumable, server.url(f"{size}.bin", slow=True), args.disk_dir)
        report["roundTrip"] = {"pauseMs": pause_ms, "firstByteMs": first_byte_ms, "offset": offset}
        print(f"  SIGINT -> token written, process gone: {pause_ms:.0f} ms")
        print(f"  new process started -> first byte appended at {offset}: "
              + (f"{first_byte_ms:.0f} ms" if first_byte_ms is not None else "not observed"))
    finally:
        server.stop()
        shutil.rmtree(files, ignore_errors=True)
        if tmpfs:
            shutil.rmtree(tmpfs, ignore_errors=True)
        shutil.rmtree(args.disk_dir, ignore_errors=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    print("\nbenchmark finished")


def concurrent_section(throughput, server, directory, size, count):
    """Prints and returns the peak RSS of `count` downloads of a `size` file at once, per transport."""
    slow_rate = max(size // 4, 1 << 20)  # about four seconds per download
    print(f"\nPeak RSS of {count} downloads at once, {human(size)} each, in one process (library, onto the disk; "
          f"slow writer: {human(slow_rate)}/s per download):")
    result = concurrent_memory(throughput, server.url(f"{size}.bin"), directory, count, slow_rate)
    for name, row in result.items():
        print(f"  {name:30} {row['rssMiB']:6.1f} MiB  ({row['wall']:.2f}s wall, {row['cpu']:.2f}s cpu)")
    return {"downloads": count, "size": size, "slowWriterBytesPerSecond": slow_rate, "results": result}


def machine():
    info = {"cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
        with open("/proc/meminfo") as f:
            info["memory"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    info["kernel"] = os.uname().release
    return info


if __name__ == "__main__":
    main()

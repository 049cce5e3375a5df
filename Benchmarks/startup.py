#!/usr/bin/env python3
"""Where the time of a short multi-connection download goes: the process's start-up, the transfer, the exit.

Starts nginx on a free 127.0.0.1 port with a location throttled like section 1 of segments.py (`limit_rate 8m;
sendfile_max_chunk 256k;`) whose access log has each request's end (`$msec`) and duration (`$request_time`), and
runs `resumable get --connections 4` and `axel -n 4` on a 100 MiB file into tmpfs, alternately. For each run:
- start: from the moment the process is started (this script's clock) to the start of its first request (nginx);
- span: from the first request's start to the last answer's end;
- exit: from the last answer's end to the process's exit.
Medians. Only loopback traffic; axel is optional (Debian package `axel`).

    python3 Benchmarks/startup.py                          # builds the release binary, 6 rounds
    python3 Benchmarks/startup.py --rounds 10 --resumable PATH
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from segments import build, free_port  # noqa: E402


def start_nginx(root, work):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    log = os.path.join(work, "timed.log")
    config = os.path.join(work, "nginx.conf")
    with open(config, "w") as f:
        f.write(f"""
daemon off; master_process off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off; sendfile on;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi; uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  log_format timed '$msec $request_time';
  server {{
    listen 127.0.0.1:{port};
    location /timed/ {{ alias {root}/; limit_rate 8m; sendfile_max_chunk 256k; access_log {log} timed; }}
  }}
}}
""")
    process = subprocess.Popen([nginx, "-p", work, "-c", config, "-e", f"{work}/error.log"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, port, log
        except OSError:
            time.sleep(0.05)
    process.terminate()
    raise SystemExit("could not start nginx")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--resumable", help="a built resumable binary (default: build the release one)")
    args = parser.parse_args()
    resumable = args.resumable or build(None)
    work = tempfile.mkdtemp(prefix="resumable-startup-")
    root = os.path.join(work, "root")
    os.makedirs(root)
    with open(os.path.join(root, "file"), "wb") as f:
        f.write(os.urandom(100 << 20))
    out = tempfile.mkdtemp(prefix="resumable-startup-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    process, port, log = start_nginx(root, work)
    url = f"http://127.0.0.1:{port}/timed/file"
    commands = {"resumable get --connections 4": [resumable, "get", url, "-o", out + "/", "--quiet", "--overwrite",
                                                  "--connections", "4"]}
    if shutil.which("axel"):
        commands["axel -n 4"] = ["axel", "-n", "4", "-q", "-o", os.path.join(out, "axel"), url]
    results = {name: [] for name in commands}
    try:
        for index in range(args.rounds):
            for name in (list(commands) if index % 2 == 0 else list(reversed(commands))):
                for entry in os.listdir(out):
                    os.remove(os.path.join(out, entry))
                open(log, "w").close()
                began = time.time()
                subprocess.run(commands[name], stdout=subprocess.DEVNULL, check=True)
                ended = time.time()
                time.sleep(0.3)  # nginx writes the log line when a request ends
                rows = [line.split() for line in open(log) if line.strip()]
                starts = [float(msec) - float(duration) for msec, duration in rows]
                ends = [float(msec) for msec, _ in rows]
                results[name].append((ended - began, min(starts) - began, max(ends) - min(starts), ended - max(ends)))
    finally:
        process.terminate()
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    def median(values):
        values = sorted(values)
        return values[len(values) // 2]

    print(f"\n## Start-up, transfer and exit: 100 MiB at 8 MiB/s per connection, 4 connections, into tmpfs\n")
    print(f"Medians of {args.rounds} alternating runs; nginx's log has ms resolution.\n")
    print("| command | wall | start to first request | first request to last answer | last answer to exit |")
    print("| --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        print(f"| `{name}` | {median(r[0] for r in rows):.3f} s | {median(r[1] for r in rows) * 1000:.1f} ms | "
              f"{median(r[2] for r in rows):.3f} s | {median(r[3] for r in rows) * 1000:.1f} ms |")


if __name__ == "__main__":
    main()

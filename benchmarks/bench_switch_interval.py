"""A round trip's wait for the interpreter lock, by switch interval (falcon.adapters.switching).

One thread of this process sends a byte to an echo server in another process and waits for it
back, 2 ms apart, ``--count`` times: alone, then beside a thread that counts in a loop (a
CPU-bound neighbour, as a lifecycle step or a watch decoding events is in the dispatcher's
process), at each switch interval in ``--intervals``. Prints the round trip's p50 and p99 in
milliseconds: beside a busy thread it waits for the lock about one interval.

Run:  .venv/bin/python benchmarks/bench_switch_interval.py [--intervals 0.005,0.001,0.0005]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ECHO = """
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
while data := connection.recv(64):
    connection.sendall(data)
"""


@contextmanager
def echo_connection() -> Iterator[socket.socket]:
    server = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            yield connection
    finally:
        server.kill()
        server.wait()


@contextmanager
def busy_neighbour() -> Iterator[None]:
    stop = threading.Event()

    def count() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def round_trips(connection: socket.socket, count: int) -> tuple[float, float]:
    """p50 and p99 of ``count`` round trips, in milliseconds."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        connection.sendall(b"x")
        connection.recv(64)
        seconds.append(time.perf_counter() - started)
        time.sleep(0.002)
    seconds.sort()
    return seconds[len(seconds) // 2] * 1000, seconds[min(len(seconds) - 1, len(seconds) * 99 // 100)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--intervals", default="0.005,0.001,0.0005", help="switch intervals, seconds")
    parser.add_argument("--count", type=int, default=500)
    args = parser.parse_args()
    default = sys.getswitchinterval()
    print("| neighbour | switch interval (ms) | round trip p50 (ms) | p99 (ms) |")
    print("|---|---|---|---|")
    with echo_connection() as connection:
        p50, p99 = round_trips(connection, args.count)
        print(f"| none | {default * 1000:g} | {p50:.2f} | {p99:.2f} |")
        with busy_neighbour():
            for interval in (float(i) for i in args.intervals.split(",")):
                sys.setswitchinterval(interval)
                p50, p99 = round_trips(connection, args.count)
                print(f"| a thread counting | {interval * 1000:g} | {p50:.2f} | {p99:.2f} |")
    sys.setswitchinterval(default)


if __name__ == "__main__":
    main()

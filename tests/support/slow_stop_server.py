#!/usr/bin/env python3
"""A server slow to stop: it answers /health, and on SIGTERM only logs and keeps running.

Started by `thetalker.lifecycle.launch` as the vllm-omni launcher's program
(``ServerSpec.executable``):
``slow_stop_server.py serve MODEL --omni ... --host H --port P [anything else]``. It spawns one
worker in its own process group (as vllm-omni's stage workers), which ignores SIGTERM too, so
only SIGKILL of the whole group stops them. It logs ``SIGTERM received`` so a test knows the
stop has begun, and ``worker pid=N`` so a test can check the worker is gone.
"""

import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(message: str) -> None:
    print(f"(slow-stop pid={os.getpid()}) {message}", flush=True)


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"status": "healthy"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def on_sigterm(signum: int, frame: object) -> None:
    log("SIGTERM received; stopping slowly")


def main() -> None:
    signal.signal(signal.SIGTERM, on_sigterm)
    if sys.argv[1:2] == ["worker"]:
        while True:
            time.sleep(3600)
    args = sys.argv[1:]
    host = args[args.index("--host") + 1]
    port = int(args[args.index("--port") + 1])
    worker = subprocess.Popen([sys.executable, __file__, "worker"], stdin=subprocess.DEVNULL)
    log(f"worker pid={worker.pid}")
    httpd = ThreadingHTTPServer((host, port), Health)
    httpd.daemon_threads = True
    log("Application startup complete.")
    httpd.serve_forever()


if __name__ == "__main__":
    main()

"""An async receiver of Ferry http jobs, with the standard library only
(docs/http-jobs.md, "Async completion"). It verifies each request's
signature, answers 202 Accepted at once, then does the work in a background
thread: it reports progress through the job's callback URL (each report also
extends the lease) and completes the job with its result.

The job's body says how much work there is: {"steps": 3, "step_ms": 200}.

    FERRY_SIGNING_SECRET=whsec_... PORT=8000 python3 receiver.py

It prints "listening http://127.0.0.1:<port>" once it serves (PORT=0 picks a
free port).
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "http-signing"))
from verify import verify  # noqa: E402  (the function docs/http-jobs.md shows)

SECRET = os.environ["FERRY_SIGNING_SECRET"]


def report(base, token, action, body):
    """POSTs one report to the job's callback route; returns the HTTP status.
    409 attempt_superseded means: this attempt no longer holds the job (a
    newer one does, or the job finished or was cancelled): stop working."""
    req = urllib.request.Request(
        f"{base}/{action}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def work(base, token, lease, job):
    """The job itself: a few steps, each reported as progress well within
    the lease, then the result."""
    steps, step = int(job.get("steps", 3)), job.get("step_ms", 200) / 1000
    assert step < lease / 3, "report at least three times per lease"
    for i in range(steps):
        time.sleep(step)
        if report(base, token, "progress", {"percent": 100 * (i + 1) / (steps + 1), "message": f"step {i + 1} of {steps}"}) == 409:
            return  # superseded or cancelled: stop
    report(base, token, "complete", {"result": {"steps": steps, "receiver": "python"}})


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            verify(SECRET, {k.lower(): v for k, v in self.headers.items()}, body)
        except ValueError as e:
            self.send_error(401, str(e))
            return
        base, token = self.headers["Ferry-Callback-Url"], self.headers["Ferry-Callback-Token"]
        lease = int(self.headers["Ferry-Callback-Lease"])
        threading.Thread(target=work, args=(base, token, lease, json.loads(body or b"{}")), daemon=True).start()
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass  # never log requests: their headers hold the callback token


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Receiver)
    print(f"listening http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()

"""Ferry's Python client: the standard library only (urllib, json, dataclasses).

Submit jobs (always with an Idempotency-Key, so retries never make a second
job), read and list them, cancel them, and follow a job's events over
Server-Sent Events with Last-Event-ID resumption::

    from ferry_client import FerryClient

    ferry = FerryClient("http://127.0.0.1:8080", api_key)
    res = ferry.submit({"type": "email.send", "payload": {"to": "a@example.com"}},
                       idempotency_key="welcome-42")
    for seq, event in ferry.job_events(res.job["id"]):
        print(event["type"], event["data"])

Every HTTP operation the client calls is declared in OPERATIONS with its
method, path and parameters; tests/test_openapi.py checks that table against
Ferry's OpenAPI document (services/api/openapi.json).
"""

from __future__ import annotations

import email.utils
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Optional, TypedDict

__all__ = [
    "FerryClient", "FerryError", "SubmitResult", "Job", "JobList", "JobRequest", "Operation",
    "OPERATIONS", "new_idempotency_key",
]

Status = Literal["queued", "scheduled", "running", "succeeded", "dead", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "dead", "cancelled"})
FINAL_EVENTS: frozenset[str] = frozenset({"completed", "dlq", "cancelled"})


class JobRequest(TypedDict, total=False):
    """The body of POST /v1/jobs (components.schemas.JobRequest)."""

    type: str
    queue: str
    priority: int
    payload: Any
    run_at: str
    delay: str
    max_attempts: int
    timeout: str
    not_after: str
    tags: list[str]
    pool: Literal["short", "long"]
    backoff: dict[str, Any]


class Job(TypedDict, total=False):
    """A job as the API shows it (components.schemas.Job)."""

    id: str
    tenant_id: str
    type: str
    queue: str
    priority: int
    pool: str
    status: Status
    attempt: int
    max_attempts: int
    payload: Any
    tags: list[str]
    created_at: str
    scheduled_for: Optional[str]
    started_at: Optional[str]
    finished_at: Optional[str]
    progress: Optional[dict[str, Any]]
    result: Any
    last_error: Optional[dict[str, str]]
    trace_id: str
    redriven_from: str
    deduplicated: bool


class JobList(TypedDict):
    """One page of GET /v1/jobs (components.schemas.JobList)."""

    jobs: list[Job]
    next_cursor: str


@dataclass(frozen=True)
class Operation:
    """One API operation the client calls, as the OpenAPI document names it."""

    operation_id: str
    method: str
    path: str
    path_params: tuple[str, ...] = ()
    query_params: tuple[str, ...] = ()
    header_params: tuple[str, ...] = ()


OPERATIONS: dict[str, Operation] = {
    op.operation_id: op
    for op in (
        Operation("submitJob", "POST", "/v1/jobs", header_params=("Idempotency-Key",)),
        Operation("getJob", "GET", "/v1/jobs/{id}", path_params=("id",)),
        Operation("listJobs", "GET", "/v1/jobs",
                  query_params=("status", "type", "queue", "tag", "created_from", "created_to",
                                "cursor", "limit")),
        Operation("cancelJob", "POST", "/v1/jobs/{id}/cancel", path_params=("id",)),
        Operation("streamJobEvents", "GET", "/v1/jobs/{id}/events", path_params=("id",),
                  header_params=("Last-Event-ID",)),
    )
}


class FerryError(Exception):
    """An error answer of the API: {"error": {"code", "message", "fields", "request_id"}}."""

    def __init__(self, status: int, code: str, message: str, fields: Optional[dict[str, str]] = None,
                 request_id: str = "", retry_after: Optional[float] = None):
        super().__init__(f"ferry: {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.fields = fields or {}
        self.request_id = request_id
        self.retry_after = retry_after


@dataclass
class SubmitResult:
    job: Job
    #: An earlier request with the same key and body created the job.
    deduplicated: bool
    #: The key sent: keep it to submit again safely.
    idempotency_key: str


def new_idempotency_key() -> str:
    """A random Idempotency-Key."""
    return "ferry-py-" + uuid.uuid4().hex


@dataclass
class _Answer:
    status: int
    headers: Any
    body: bytes


@dataclass
class FerryClient:
    """A client of one Ferry deployment with one API key.

    Answers that mean "nothing was done, try again" (429, 503, 409
    idempotency_request_in_flight) are retried after their Retry-After, else
    after an exponential backoff with jitter, up to max_attempts; network
    errors only for calls that are safe to repeat (reads, submissions, which
    always carry an Idempotency-Key, and cancels).
    """

    base_url: str
    api_key: str
    timeout: float = 30.0
    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 10.0
    user_agent: str = "ferry-python/0.1.0"
    _opener: urllib.request.OpenerDirector = field(default_factory=urllib.request.build_opener, repr=False)

    # -- jobs ---------------------------------------------------------------

    def submit(self, job: JobRequest, idempotency_key: Optional[str] = None) -> SubmitResult:
        """Submit a job (POST /v1/jobs); retries are safe thanks to the key."""
        key = idempotency_key or new_idempotency_key()
        ans = self._call("submitJob", body=job, headers={"Idempotency-Key": key})
        out: Job = json.loads(ans.body)
        return SubmitResult(job=out, deduplicated=ans.status == 200 or bool(out.get("deduplicated")),
                            idempotency_key=key)

    def get(self, job_id: str) -> Job:
        """A job of the caller's tenant (GET /v1/jobs/{id}); FerryError 404 if none."""
        return json.loads(self._call("getJob", path={"id": job_id}).body)

    def list(self, *, status: Optional[Status] = None, type: Optional[str] = None,
             queue: Optional[str] = None, tags: Optional[list[str]] = None,
             created_from: Optional[str] = None, created_to: Optional[str] = None,
             cursor: Optional[str] = None, limit: Optional[int] = None) -> JobList:
        """One page of the tenant's jobs, newest first (GET /v1/jobs).

        created_from (inclusive) and created_to (exclusive) bound the creation
        time, as RFC 3339 strings (e.g. datetime.isoformat() of an aware datetime).
        """
        query: dict[str, Any] = {"status": status, "type": type, "queue": queue, "tag": tags,
                                 "created_from": created_from, "created_to": created_to,
                                 "cursor": cursor, "limit": limit}
        return json.loads(self._call("listJobs", query=query).body)

    def iter_jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job matching the filters of list, page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.list(cursor=cursor, **filters)
            yield from page["jobs"]
            nxt = page.get("next_cursor") or ""
            if not nxt or nxt == cursor:
                return
            cursor = nxt

    def cancel(self, job_id: str) -> Job:
        """Ask Ferry to cancel a job; returns the job as it was (POST /v1/jobs/{id}/cancel)."""
        return json.loads(self._call("cancelJob", path={"id": job_id}).body)["job"]

    def wait(self, job_id: str, timeout: float = 300.0, poll: float = 0.2) -> Job:
        """Poll the job until it is succeeded, dead or cancelled."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.get("status") in TERMINAL:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job.get('status')} after {timeout}s")
            time.sleep(poll)

    def job_events(self, job_id: str, last_event_id: Optional[int] = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield (seq, event) for one job until its final event (completed, dlq
        or cancelled), from its first event or after last_event_id, resuming
        a dropped connection with Last-Event-ID."""
        failures = 0
        while failures < self.max_attempts:
            headers = {"Accept": "text/event-stream"}
            if last_event_id is not None:
                headers["Last-Event-ID"] = str(last_event_id)
            req = self._request(OPERATIONS["streamJobEvents"], {"id": job_id}, None, None, headers)
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    if resp.status == 204:  # the final event was already delivered
                        return
                    for msg in _sse_messages(resp):
                        if not msg.get("id") or not msg.get("data") or msg.get("event") in ("reset", "overflow"):
                            continue
                        last_event_id, failures = int(msg["id"]), 0
                        event = json.loads(msg["data"])
                        yield last_event_id, event
                        if event.get("type") in FINAL_EVENTS:
                            return
            except urllib.error.HTTPError as e:
                raise _error_of(e.code, e.headers, e.read()) from None
            except (urllib.error.URLError, OSError):
                pass
            failures += 1
            time.sleep(self._backoff(failures))
        raise ConnectionError(f"event stream of {job_id} keeps failing")

    # -- plumbing -----------------------------------------------------------

    def _request(self, op: Operation, path: Optional[dict[str, str]], query: Optional[dict[str, Any]],
                 body: Any, headers: Optional[dict[str, str]]) -> urllib.request.Request:
        url_path = op.path
        for name in op.path_params:
            url_path = url_path.replace("{" + name + "}", urllib.parse.quote((path or {})[name], safe=""))
        url = self.base_url.rstrip("/") + url_path
        pairs = [(k, v) for k, vs in (query or {}).items() if vs is not None
                 for v in (vs if isinstance(vs, list) else [vs])]
        if pairs:
            url += "?" + urllib.parse.urlencode(pairs)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=op.method)
        req.add_header("Authorization", "Bearer " + self.api_key)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", self.user_agent)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        return req

    def _call(self, operation_id: str, *, path: Optional[dict[str, str]] = None,
              query: Optional[dict[str, Any]] = None, body: Any = None,
              headers: Optional[dict[str, str]] = None) -> _Answer:
        op = OPERATIONS[operation_id]
        safe = op.method == "GET" or operation_id in ("submitJob", "cancelJob")
        for attempt in range(1, self.max_attempts + 1):
            req = self._request(op, path, query, body, headers)
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    return _Answer(resp.status, resp.headers, resp.read())
            except urllib.error.HTTPError as e:
                err = _error_of(e.code, e.headers, e.read())
                if attempt == self.max_attempts or not _retryable(err):
                    raise err from None
                time.sleep(err.retry_after if err.retry_after is not None else self._backoff(attempt))
            except (urllib.error.URLError, OSError):
                if not safe or attempt == self.max_attempts:
                    raise
                time.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    def _backoff(self, n: int) -> float:
        d = min(self.base_delay * 2 ** (n - 1), self.max_delay)
        return d / 2 + random.random() * d / 2


def _retryable(err: FerryError) -> bool:
    return err.status in (429, 503) or err.code in ("idempotency_request_in_flight", "redrive_in_flight")


def _error_of(status: int, headers: Any, body: bytes) -> FerryError:
    retry_after = _retry_after(headers.get("Retry-After") if headers else None)
    try:
        e = json.loads(body)["error"]
        fields = e.get("fields") or {}
        if isinstance(fields, list):
            fields = {f.get("field") or f.get("name", ""): f.get("message", "") for f in fields}
        return FerryError(status, e["code"], e.get("message", ""), fields, e.get("request_id", ""), retry_after)
    except (ValueError, KeyError, TypeError, AttributeError):
        return FerryError(status, f"http_{status}", body[:500].decode(errors="replace"), retry_after=retry_after)


def _retry_after(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    v = v.strip()
    if v.isdigit():
        return float(min(int(v), 86400))
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _sse_messages(resp: Any) -> Iterator[dict[str, str]]:
    """Parse a text/event-stream body into messages ({"id", "event", "data"})."""
    msg: dict[str, str] = {}
    data: list[str] = []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data or "id" in msg:
                msg["data"] = "\n".join(data)
                yield msg
            msg, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name in ("id", "event"):
            msg[name] = value

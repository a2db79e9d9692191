"""End-to-end check of the Python client against a running Ferry
(FERRY_URL, FERRY_API_KEY): submit with an Idempotency-Key (twice: one
job), get, list by tag, follow the job's events until it completes, and read
it succeeded. cmd/ferry's TestPythonClient runs it."""

import json
import os
import sys
import time

from ferry_client import FerryClient, FerryError, new_idempotency_key


def check(ok: bool, what: object) -> None:
    """Fail the run unless ok (assert is skipped under python -O)."""
    if not ok:
        raise AssertionError(what)


def main() -> None:
    ferry = FerryClient(os.environ["FERRY_URL"], os.environ["FERRY_API_KEY"])
    key = new_idempotency_key()
    tag = "py-e2e-" + key[-8:]
    job = {"type": "sleep", "payload": {"ms": 300}, "tags": [tag]}

    first = ferry.submit(job, idempotency_key=key)
    check(not first.deduplicated, first)
    job_id = first.job["id"]
    again = ferry.submit(job, idempotency_key=key)
    check(again.deduplicated and again.job["id"] == job_id, again)

    got = ferry.get(job_id)
    check(got["id"] == job_id and got["type"] == "sleep", got)
    try:
        ferry.get("job_00000000-0000-7000-8000-000000000000")
        raise AssertionError("an unknown job was found")
    except FerryError as e:
        check(e.status == 404 and e.code == "not_found", e)

    # Lists read the status projection, which follows the log a moment
    # behind the 202 (GET of a just-submitted job is served from a cache).
    page = ferry.list(tags=[tag])
    for _ in range(100):
        if page["jobs"]:
            break
        time.sleep(0.1)
        page = ferry.list(tags=[tag])
    check([j["id"] for j in page["jobs"]] == [job_id], page)
    check([j["id"] for j in ferry.iter_jobs(tags=[tag], limit=1)] == [job_id], "iter_jobs")

    seen = []
    for seq, event in ferry.job_events(job_id):
        check(seq > 0 and event["job_id"] == job_id, event)
        seen.append(event["type"])
    check(seen[0] == "enqueued" and "started" in seen and seen[-1] == "completed", seen)

    # The status projection shows the completion a moment after the stream.
    done = ferry.wait(job_id, timeout=60)
    check(done["status"] == "succeeded", done)
    print(json.dumps({"ok": True, "id": job_id, "events": seen}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - report any failure as exit 1
        print(f"e2e failed: {e!r}", file=sys.stderr)
        sys.exit(1)

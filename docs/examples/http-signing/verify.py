"""Checks the Standard Webhooks signature of a request Ferry's http handler
sent (docs/http-jobs.md), with the standard library only. As a command it
reads the secret from FERRY_SIGNING_SECRET, the headers from WEBHOOK_ID,
WEBHOOK_TIMESTAMP and WEBHOOK_SIGNATURE, the raw body from stdin, and prints
"verified" or fails. In a server, call verify with the request's headers
(any mapping with lower-case names, or a case-insensitive one) and raw body.
"""
import base64
import hashlib
import hmac
import os
import sys
import time

# BEGIN verify


def verify(secret, headers, body, now=None):
    """Raise ValueError unless the request comes from Ferry: its timestamp is
    within 5 minutes of now (a replayed request is refused), and one of the
    signatures is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
    under the secret, compared in constant time."""
    tolerance = 5 * 60  # seconds
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    now = time.time() if now is None else now
    if not ts.isdigit() or abs(now - int(ts)) > tolerance:
        raise ValueError("timestamp outside the tolerance")
    want = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    for sig in headers.get("webhook-signature", "").split():
        version, _, b64 = sig.partition(",")
        try:
            got = base64.b64decode(b64, validate=True)
        except ValueError:
            continue
        if version == "v1" and hmac.compare_digest(got, want):
            return
    raise ValueError("no valid signature")


# END verify

if __name__ == "__main__":
    headers = {
        "webhook-id": os.environ.get("WEBHOOK_ID", ""),
        "webhook-timestamp": os.environ.get("WEBHOOK_TIMESTAMP", ""),
        "webhook-signature": os.environ.get("WEBHOOK_SIGNATURE", ""),
    }
    try:
        verify(os.environ.get("FERRY_SIGNING_SECRET", ""), headers, sys.stdin.buffer.read())
    except ValueError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
    print("verified")

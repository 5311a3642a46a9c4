"""A webhook receiver on 127.0.0.1 for tests: records every POST (path, headers, body) and
answers what a test queued for its path, else 200; `signature_ok(request, secret)` checks the
X-Mint-Signature header as a receiver should (HMAC-SHA256 of the raw body)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    code: int  # what the receiver answered

    @property
    def event(self) -> dict:
        return json.loads(self.body)


class Receiver:
    """A webhook receiver: records every POST; a path answers the codes queued for it first
    (`fail(path, 500, 500)`), then `answer.get(path, 200)`."""

    def __init__(self):
        self.requests: list[Request] = []
        self.queued: dict[str, list[int]] = {}
        self.answer: dict[str, int] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def fail(self, path: str, *codes: int) -> None:
        self.queued.setdefault(path, []).extend(codes)

    def at(self, path: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    queue = receiver.queued.get(self.path)
                    code = queue.pop(0) if queue else receiver.answer.get(self.path, 200)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.requests.append(Request(self.path, headers, body, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        return Handler


def signature_ok(request: Request, secret: str) -> bool:
    """What a receiver does (docs/webhooks.md): HMAC-SHA256 of the raw body, compared in
    constant time."""
    mac = hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest("sha256=" + mac, request.headers["x-mint-signature"])

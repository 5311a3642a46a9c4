"""A real S3 API for tests: `moto_server` as a process on a free port of 127.0.0.1.

`shared_server()` starts one per test process, on first use, and stops it (by its pid) when
the process exits. Each test takes a fresh bucket from `new_bucket()`; `env` holds the
standard AWS settings that point boto3 at the server.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from support import free_port


def _moto_server() -> str:
    beside = Path(sys.executable).parent / "moto_server"
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if not found:
        raise RuntimeError('moto_server is not installed: pip install "moto[server]"')
    return found


class MotoServer:
    """A running `moto_server -H 127.0.0.1 -p PORT`."""

    def __init__(self, log_dir: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log = open(os.devnull, "wb") if log_dir is None else open(log_dir / "moto.log", "wb")
        self.proc = subprocess.Popen(
            [_moto_server(), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.env = {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        self._client = None
        self._wait()

    def _wait(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on {self.url}")

    def client(self):
        """A boto3 client of the server's own, behind the store's back."""
        import boto3

        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.url,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                region_name="us-east-1",
            )
        return self._client

    def new_bucket(self) -> str:
        """Create a bucket no other test uses; its name."""
        name = f"mint-test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server by its pid."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


_shared: MotoServer | None = None


def shared_server() -> MotoServer:
    """The test process's one moto server, started on first use, stopped at exit."""
    global _shared
    if _shared is None or _shared.proc.poll() is not None:
        _shared = MotoServer()
        atexit.register(_shared.stop)
    return _shared

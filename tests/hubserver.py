"""A real Hugging Face Hub for tests: git repos served by `olah` in offline mode.

`HubServer(root)` lays out `root/mirrors/models/ORG/NAME` (each a git repo made with the
`git` command) and runs `olah-cli -c olah.toml` on a free port. The unmodified
`huggingface_hub` client talks to it through `endpoint`. Large files are stored the way the
Hub stores them: a Git-LFS pointer in git and the bytes under `.git/lfs/objects/`, which olah
serves (and lists with their sha256 oid) without git-lfs being installed.

Also here: `gated_hub()`, a stub server that answers every request as the Hub answers a gated
repo without a token, because olah cannot gate a repo (its mirror metadata is never gated).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port_endpoint() -> str:
    """An endpoint nobody listens on: connections are refused."""
    return f"http://127.0.0.1:{free_port()}"


class GitRepo:
    """One hub repository as a git repo; commits are made with the `git` command."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "-b", "main")
        self._clock = 1_700_000_000  # fixed, increasing commit times: hub order is testable

    def _git(self, *args: str, env: dict | None = None) -> str:
        base = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(self.path)}
        out = subprocess.run(
            ["git", "-c", "user.name=hub", "-c", "user.email=hub@example.invalid", *args],
            cwd=self.path, env={**os.environ, **base, **(env or {})}, check=True,
            capture_output=True, text=True,
        )  # fmt: skip
        return out.stdout.strip()

    def commit(self, files: dict[str, str | bytes | Path], message: str, *, replace: bool = False) -> str:
        """Write FILES (repo path -> text, bytes or a file/folder to copy) and commit; returns the sha.

        A folder value copies the folder's files under that path ("" for the root).
        With `replace`, every tracked file is removed first.
        """
        if replace:
            self._git("rm", "-rq", "--ignore-unmatch", ".")
        for rel, value in files.items():
            if isinstance(value, Path) and value.is_dir():
                for src in sorted(p for p in value.rglob("*") if p.is_file()):
                    self._write(f"{rel}/{src.relative_to(value).as_posix()}".lstrip("/"), src.read_bytes())
            else:
                self._write(rel, value.read_bytes() if isinstance(value, Path) else value)
        self._git("add", "-A")
        self._clock += 60
        date = f"@{self._clock} +0000"
        self._git("commit", "-q", "--allow-empty", "-m", message,
                  env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})  # fmt: skip
        return self.head()

    def _write(self, rel: str, data: str | bytes) -> None:
        data = data.encode() if isinstance(data, str) else data
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(LFS_SUFFIXES):
            oid = hashlib.sha256(data).hexdigest()
            obj = self.path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
            obj.parent.mkdir(parents=True, exist_ok=True)
            obj.write_bytes(data)
            data = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()
        target.write_bytes(data)

    def tag(self, name: str, rev: str = "HEAD") -> None:
        self._git("tag", name, rev)

    def branch(self, name: str, rev: str = "HEAD") -> None:
        self._git("branch", "-f", name, rev)

    def head(self) -> str:
        return self._git("rev-parse", "HEAD")


class HubServer:
    """olah over `root/mirrors`, on a free port. Use as a context manager, or start()/stop()."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.mirrors = self.root / "mirrors"
        self.mirrors.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def repo(self, repo_id: str) -> GitRepo:
        org, name = repo_id.split("/")
        return GitRepo(self.mirrors / "models" / org / name)

    def start(self, probe: str, timeout: float = 60.0) -> HubServer:
        """Start olah and wait until `GET /api/models/PROBE/revision/main` answers."""
        config = self.root / "olah.toml"
        config.write_text(
            "[basic]\n"
            f'host = "127.0.0.1"\nport = {self.port}\n'
            f'repos-path = "{self.root / "repos"}"\n'
            f'mirrors-path = ["{self.mirrors}"]\n'
            "metadata-cache-ttl = 0\n"  # tests add tags while it runs
            "[accessibility]\noffline = true\n"
        )
        olah = Path(sys.executable).with_name("olah-cli")
        self.log = open(self.root / "olah.log", "wb")
        self.proc = subprocess.Popen(
            [str(olah if olah.exists() else "olah-cli"), "-c", str(config)],
            cwd=self.root, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        url = f"{self.endpoint}/api/models/{probe}/revision/main"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"olah exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"olah did not answer {url} within {timeout}s: {self.log_text()[-2000:]}")

    def log_text(self) -> str:
        try:
            return (self.root / "olah.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # olah and any workers it started
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        self.log.close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _GatedHandler(http.server.BaseHTTPRequestHandler):
    """Answers as huggingface.co does for a gated repo asked for without a token."""

    def _gated(self) -> None:
        body = b'{"error":"Access to model is restricted. You must have access to it and be authenticated."}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("X-Error-Message", "Access to model is restricted and you are not in the authorized list.")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = _gated

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def gated_hub():
    """A stub endpoint where every repo is gated. Yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GatedHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst

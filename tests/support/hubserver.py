"""A real Hugging Face Hub for tests: git repos served by `olah` in offline mode.

`HubServer(root)` lays out `root/mirrors/models/ORG/NAME` (each a git repo made with the
`git` command) and runs `olah-cli -c olah.toml` on a free port. The unmodified
`huggingface_hub` client talks to it through `endpoint`. Large files are stored the way the
Hub stores them: a Git-LFS pointer in git and the bytes under `.git/lfs/objects/`, which olah
serves (and lists with their sha256 oid) without git-lfs being installed.

Also here: `gated_hub()`, a stub server that answers every request as the Hub answers a gated
repo without a token, because olah cannot gate a repo (its mirror metadata is never gated);
and `StubHub`, a hostile hub that serves one repo at one commit and may lie in its answers
(paths that walk out of a folder, a commit sha that is a path), which olah cannot be made to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from support import free_port

LFS_SUFFIXES = (".safetensors", ".bin", ".pt")


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
        base = {
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.path),
        }
        out = subprocess.run(
            ["git", "-c", "user.name=hub", "-c", "user.email=hub@example.invalid", *args],
            cwd=self.path,
            env={**os.environ, **base, **(env or {})},
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def commit(
        self, files: dict[str, str | bytes | Path], message: str, *, replace: bool = False
    ) -> str:
        """Write FILES (repo path -> text, bytes or a file/folder to copy) and commit; returns
        the sha.

        A folder value copies the folder's files under that path ("" for the root).
        With `replace`, every tracked file is removed first.
        """
        if replace:
            self._git("rm", "-rq", "--ignore-unmatch", ".")
        for rel, value in files.items():
            if isinstance(value, Path) and value.is_dir():
                for src in sorted(p for p in value.rglob("*") if p.is_file()):
                    self._write(
                        f"{rel}/{src.relative_to(value).as_posix()}".lstrip("/"), src.read_bytes()
                    )
            else:
                self._write(rel, value.read_bytes() if isinstance(value, Path) else value)
        self._git("add", "-A")
        self._clock += 60
        date = f"@{self._clock} +0000"
        self._git(
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
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
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\n"
            data = f"{pointer}size {len(data)}\n".encode()
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
            cwd=self.root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        url = f"{self.endpoint}/api/models/{probe}/revision/main"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"olah exited with {self.proc.returncode}: {self.log_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"olah did not answer {url} within {timeout}s: {self.log_text()[-2000:]}"
        )

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
        body = (
            b'{"error":"Access to model is restricted. You must have access to it and be '
            b'authenticated."}'
        )
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", "GatedRepo")
        self.send_header(
            "X-Error-Message",
            "Access to model is restricted and you are not in the authorized list.",
        )
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


class StubHub:
    """A stub hub for one repo at one commit, speaking the Hub's HTTP API as huggingface_hub
    calls it, whose answers may lie.

    FILES maps repo paths to bytes: what the tree listing names and `resolve/` serves. LISTED
    adds paths that the listing names as well (say "../evil.md"); they are served as b"EVIL"
    if anyone asks. SHA is the commit the hub claims its revisions point at; ETAGS sets the
    ETag sent with some files. Every request path is kept in `requests`. Use as a context
    manager; `endpoint` is its URL.
    """

    def __init__(self, repo_id: str, files: dict[str, bytes], *, listed=(), sha=None, etags=None):
        self.repo_id, self.files, self.listed = repo_id, dict(files), list(listed)
        self.sha = sha or hashlib.sha1(repr(sorted(self.files)).encode()).hexdigest()
        self.etags = dict(etags or {})
        self.requests: list[str] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StubHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str) -> tuple[int, dict, bytes]:
        """(status, headers, body) for a request path."""
        self.requests.append(path)
        api, resolve = f"/api/models/{self.repo_id}/", f"/{self.repo_id}/resolve/"
        if path == api + "refs":
            return _json(
                {"branches": [self._ref("main")], "tags": [self._ref("v1")], "converts": []}
            )
        if path.startswith(api + "revision/"):
            siblings = [{"rfilename": p} for p in self._listing()]
            return _json({"id": self.repo_id, "sha": self.sha, "siblings": siblings})
        if path.startswith(api + "tree/"):
            return _json([self._entry(p) for p in self._listing()])
        if path.startswith(resolve):
            name = path[len(resolve) :].split("/", 1)[1]
            body = self._body(name)
            etag = self.etags.get(name, hashlib.sha1(body).hexdigest())
            return 200, {"X-Repo-Commit": self.sha, "ETag": f'"{etag}"'}, body
        return 404, {"X-Error-Code": "RepoNotFound"}, b'{"error":"Repository not found"}'

    def _listing(self) -> list[str]:
        return [*self.files, *self.listed]

    def _entry(self, path: str) -> dict:
        body = self._body(path)
        return {
            "type": "file",
            "path": path,
            "size": len(body),
            "oid": hashlib.sha1(body).hexdigest(),
        }

    def _body(self, path: str) -> bytes:
        return self.files.get(path, b"EVIL")

    def _ref(self, name: str) -> dict:
        kind = "heads" if name == "main" else "tags"
        return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": self.sha}

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                status, headers, body = stub.answer(path)
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_HEAD = do_GET

            def log_message(self, *args) -> None:
                pass

        return Handler


def _json(value) -> tuple[int, dict, bytes]:
    return 200, {"Content-Type": "application/json"}, json.dumps(value).encode()


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst

"""Every forward pass on a vLLM server: `mint serve SET@CHANNEL --engine vllm --engine-url URL`.

The server, pipeline, following, canaries and traces are the embedded runtime's; only the
engine differs. `VllmEngine` is an `Engine` whose router and generation calls go to a vLLM
server that has mint's plugin (`mint.vllm`), each adapter asked for by its content address
`LINE@<commit id>`: the plugin fetches, verifies and loads it there on first use. Swapping to
another set version is therefore only a change of the names asked for: nothing is reloaded,
vLLM is not restarted, and requests already running on the old version finish on it.

Prompts are tokenized here, with the base's own tokenizer, and sent to vLLM as token ids, and
the answers come back as token ids, decoded here as the embedded engine decodes them: the two
engines see and return the same tokens. Routing is constrained decoding over the set's labels
(vLLM's structured outputs `choice`); a router that cannot answer gives the set's default.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import httpx

from mint.bases import fingerprint_path
from mint.errors import BaseFolderMismatch, InvalidConfig
from mint.ids import vllm_name
from mint.objects import AdapterFiles, SetSpec
from mint.runtime import prompts
from mint.runtime.decoding import Generation, GenRow, TextStream, finish_row
from mint.runtime.engine import Engine, check_spec
from mint.runtime.errors import EngineUnavailable
from mint.runtime.router import RouteDecision

log = logging.getLogger("mint.runtime")

TIMEOUT = httpx.Timeout(300.0, connect=10.0)
MAX_INFLIGHT = 64  # requests one front end has open to its vLLM server at once


def member_name(files: AdapterFiles) -> str:
    """What vLLM is asked for to run a member (mint's plugin resolves it): LINE@<commit>."""
    if not files.line:
        raise InvalidConfig(f"adapter {files.commit_id[:12]} has no line: vLLM cannot name it")
    return vllm_name(files.line, files.commit_id)


class VllmBase:
    """The frozen base as a vLLM server serves it: the server at URL, and the base's folder
    here for its tokenizer and fingerprint (what the set was committed for)."""

    def __init__(self, url: str, base_dir: str | Path, *, api_key: str | None = None):
        from transformers import AutoTokenizer

        self.url = url.rstrip("/")
        self.path = Path(base_dir)
        self.fingerprint = fingerprint_path(base_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=MAX_INFLIGHT, max_keepalive_connections=16)
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=TIMEOUT, limits=limits
        )
        self.pool = ThreadPoolExecutor(MAX_INFLIGHT, thread_name_prefix="mint-vllm")
        self.served, self.max_positions = self._describe()

    def _describe(self) -> tuple[str, int]:
        """(the base's served name, its max_model_len) from the server's /v1/models."""
        try:
            response = self.http.get("/v1/models")
            response.raise_for_status()
            model = response.json()["data"][0]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise EngineUnavailable(f"no vLLM server answers at {self.url}: {exc}") from None
        return model["id"], int(model.get("max_model_len") or 2048)

    def check_fingerprint(self, expected: str, what: str = "the set") -> None:
        if expected != self.fingerprint:
            raise BaseFolderMismatch(what, expected, str(self.path), self.fingerprint)

    def loaded(self) -> dict[str, int]:
        """Nothing is loaded here: vLLM keeps its adapters (and evicts them) itself."""
        return {}

    def release(self, names) -> None:
        """Nothing to unload here (see `loaded`)."""

    def complete(self, body: dict, on_tokens: Callable[[list[int]], bool] | None = None) -> dict:
        """One streamed /v1/completions call; `on_tokens(ids)` gets each chunk's token ids and
        returning True stops the stream (a cancelled request). Returns the last choice with
        every token id gathered under `token_ids` and `stopped` when it was cut short."""
        body = {**body, "stream": True, "return_token_ids": True, "temperature": 0.0}
        got: list[int] = []
        last: dict = {}
        try:
            with self.http.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise EngineUnavailable(_error_line(response))
                for line in response.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    for choice in chunk.get("choices") or []:
                        ids = choice.get("token_ids") or []
                        got += ids
                        last = choice
                        if on_tokens is not None and on_tokens(ids):
                            return {**last, "token_ids": got, "stopped": True}
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"vLLM at {self.url}: {exc}") from None
        return {**last, "token_ids": got, "stopped": False}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()


def _error_line(response: httpx.Response) -> str:
    try:
        error = response.json().get("error") or {}
        message = error.get("message") if isinstance(error, dict) else str(error)
    except ValueError:
        message = response.text[:200]
    return f"vLLM answered {response.status_code}: {message}"


class VllmEngine(Engine):
    """A set version served by a vLLM server: the same stages as `Engine`, other hands."""

    def __init__(self, base: VllmBase, spec: SetSpec, label_ids: list[list[int]]):
        super().__init__(base, spec, label_ids)
        self.router = member_name(spec.router)
        self.summarizer = member_name(spec.summary)
        self.experts = {label: member_name(f) for label, f in spec.experts.items()}

    def route_many(self, conversations: Sequence[Sequence[dict]]) -> list[RouteDecision]:
        """A label for each conversation: the router's constrained choice among the labels,
        all asked at once; the default for one that cannot be routed."""
        if self.spec.single:
            return super().route_many(conversations)
        return list(self.base.pool.map(self._route_one, conversations))

    def _route_one(self, messages: Sequence[dict]) -> RouteDecision:
        labels = list(self.spec.labels)
        try:
            longest = max(len(ids) for ids in self._label_ids)
            head, body = prompts.route_text(self.spec.route_prompt, messages)
            prompt = prompts.encode_prompt(
                self.base.tokenizer, head, body, self.base.max_positions - longest
            )
            request = {
                "model": self.router,
                "prompt": prompt,
                "max_tokens": longest,
                "structured_outputs": {"choice": labels},
            }
            ids = self.base.complete(request)["token_ids"]
            chosen = self.base.tokenizer.decode(ids, skip_special_tokens=True).strip()
        except Exception as exc:  # noqa: BLE001 - routing must always produce a label
            return self._fallback(exc)
        if chosen not in labels:
            return RouteDecision(self.spec.default, {}, f"the router answered {chosen!r}")
        return RouteDecision(chosen, {})

    def generate_many(self, rows: Sequence[GenRow]) -> list[Generation]:
        made = self.generate_each(rows)
        for got in made:
            if isinstance(got, Exception):
                raise got
        return made  # type: ignore[return-value]

    def generate_each(
        self, rows: Sequence[GenRow], between: Callable[[], bool] | None = None
    ) -> list[Generation | Exception]:
        """Every row as its own request, all in flight together (vLLM batches them); a row
        that fails has its exception in its place. `between()` runs while they are."""
        futures = [self.base.pool.submit(self._generate_row, row) for row in rows]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            if pending and between is not None:
                between()
        return [f.exception() or f.result() for f in futures]  # type: ignore[misc]

    def _generate_row(self, row: GenRow) -> Generation:
        stream = TextStream(self.base.tokenizer, row.on_text) if row.on_text else None
        eos = self.base.tokenizer.eos_token_id

        def on_tokens(ids: list[int]) -> bool:
            if stream is not None:
                for token in ids:
                    if token != eos:
                        stream.push(token)
            return row.cancelled()

        request = {"model": row.adapter, "prompt": row.prompt, "max_tokens": row.max_new_tokens}
        choice = self.base.complete(request, on_tokens)
        new = list(choice["token_ids"])
        stopped_by_end = choice.get("finish_reason") == "stop" and not choice["stopped"]
        if stopped_by_end and eos is not None and (not new or new[-1] != eos):
            new.append(eos)  # vLLM leaves the end token out; the embedded engine counts it
        made = len(new) if choice["stopped"] or not stopped_by_end else None
        generation = finish_row(self.base.tokenizer, row, new, made)
        if stream is not None:
            stream.close(generation.text)
        return generation

    def close(self) -> None:
        """Nothing to unload: vLLM evicts adapters no request asks for."""
        self._closed = True


def load_vllm_engine(base: VllmBase, spec: SetSpec) -> VllmEngine:
    """Check a set version for serving on vLLM: consistency, base fingerprint, labels, then
    one token from each of its adapters, so that mint's plugin fetches, verifies and loads
    them on the vLLM server before the version serves. A refusal there (bytes that do not
    verify, another base, a token that may not read a line) fails the staging, and the
    version serving goes on."""
    from mint.runtime.router import label_sequences

    check_spec(spec)
    base.check_fingerprint(spec.base_fingerprint, f"set {spec.name} ({spec.id[:12]})")
    label_ids = [] if spec.single else label_sequences(base.tokenizer, spec.labels)
    engine = VllmEngine(base, spec, label_ids)
    first = base.tokenizer.bos_token_id or 0
    futures = [
        base.pool.submit(base.complete, {"model": name, "prompt": [first], "max_tokens": 1})
        for name in engine.adapter_names()
    ]
    for future in futures:
        future.result()
    return engine

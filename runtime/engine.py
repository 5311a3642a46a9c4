"""One set version loaded on the shared base: route, answer and summarise with its adapters.

An adapter line served alone (`SetSpec.single`) loads the same way, as a set of one member
that is never routed and writes no summaries (see `pipeline`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from mint.errors import InvalidConfig
from mint.objects import AdapterFiles, SetSpec
from mint.runtime import prompts
from mint.runtime.decoding import Generation, GenRow, generate_each, generate_rows
from mint.runtime.errors import UnknownModel
from mint.runtime.loader import SharedBase, adapter_name
from mint.runtime.router import RouteDecision, decide, label_sequences, score_batch

Verify = Callable[[SetSpec], None]


def members(spec: SetSpec) -> dict[str, AdapterFiles]:
    """Every distinct adapter commit of a set, by commit id."""
    files = [spec.router, spec.summary, *spec.experts.values()]
    return {f.commit_id: f for f in files}


def check_spec(spec: SetSpec) -> None:
    """Refuse a set whose labels, experts and default disagree, or an adapter served alone
    that is not its one label's only member."""
    if not spec.labels:
        raise InvalidConfig(f"set {spec.name} has no labels")
    if len(set(spec.labels)) != len(spec.labels):
        raise InvalidConfig(f"set {spec.name} repeats a label")
    missing = [label for label in spec.labels if label not in spec.experts]
    if missing:
        raise InvalidConfig(f"set {spec.name}: label(s) {', '.join(missing)} have no expert")
    if spec.default not in spec.labels:
        raise InvalidConfig(f"set {spec.name}: default {spec.default!r} is not a label")
    if spec.single and (len(spec.labels) != 1 or len(members(spec)) != 1):
        raise InvalidConfig(f"adapter {spec.name}: served alone, it must be its only member")


class Engine:
    """A loaded set version. Build it with `load_engine`; `close()` unloads what only it used."""

    def __init__(self, base: SharedBase, spec: SetSpec, label_ids: list[list[int]]):
        self.base = base
        self.spec = spec
        self.router = adapter_name(spec.router.commit_id)
        self.summarizer = adapter_name(spec.summary.commit_id)
        self.experts = {label: adapter_name(f.commit_id) for label, f in spec.experts.items()}
        self._label_ids = label_ids
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def id(self) -> str:
        """The set commit id this engine serves."""
        return self.spec.id

    def expert_for(self, model: str) -> str | None:
        """What a request for `model` runs: None (route) for this set, else the expert's label.

        Raises UnknownModel for any other name. An adapter served alone has one name, its
        line's, which names its one expert: the caller names the adapter that answers."""
        if model == self.spec.name and not self.spec.single:
            return None
        if model in self.experts:
            return model
        raise UnknownModel(model, self.spec.name)

    def adapter_names(self) -> list[str]:
        """The distinct adapter names this engine uses."""
        return sorted({self.router, self.summarizer, *self.experts.values()})

    def route(self, messages: Sequence[dict]) -> RouteDecision:
        """Pick a label for the conversation; the set's default when routing cannot run."""
        return self.route_many([messages])[0]

    def route_many(self, conversations: Sequence[Sequence[dict]]) -> list[RouteDecision]:
        """A label for each conversation, all scored together (`router.score_batch`).

        Each conversation is tokenized on its own: one the tokenizer refuses gets the default
        label (its answer stage then fails it alone), the others are routed as usual. An
        adapter served alone (`spec.single`) is every conversation's label: no model runs."""
        if self.spec.single:
            return [RouteDecision(self.spec.default, {}) for _ in conversations]
        labels, tokenizer = list(self.spec.labels), self.base.tokenizer
        decisions: list[RouteDecision | None] = [None] * len(conversations)
        budget = self.base.max_positions - max(len(ids) for ids in self._label_ids)
        batch: dict[int, list[int]] = {}
        for i, messages in enumerate(conversations):
            try:
                head, body = prompts.route_text(self.spec.route_prompt, messages)
                batch[i] = prompts.encode_prompt(tokenizer, head, body, budget)
            except Exception as exc:  # noqa: BLE001 - routing must always produce a label
                decisions[i] = self._fallback(exc)
        scores: list = []
        try:
            if batch:
                with self.base.using(self.router) as model:
                    pad = tokenizer.pad_token_id
                    scores = score_batch(model, list(batch.values()), self._label_ids, pad)
        except Exception as exc:  # noqa: BLE001 - routing must always produce a label
            scores = [self._fallback(exc)] * len(batch)
        for i, score in zip(batch, scores):
            if not isinstance(score, RouteDecision):
                score = decide(labels, score, self.spec.default)
            decisions[i] = score
        return decisions  # type: ignore[return-value]

    def _fallback(self, exc: BaseException) -> RouteDecision:
        why = f"routing failed: {type(exc).__name__}: {exc}"
        return RouteDecision(self.spec.default, {}, why)

    def prompt(self, head: str, body: str, max_new_tokens: int) -> list[int]:
        """A prompt's ids, cut to leave room for `max_new_tokens`."""
        budget = self.base.max_positions - max_new_tokens
        return prompts.encode_prompt(self.base.tokenizer, head, body, budget)

    def generate(self, adapter: str, head: str, body: str, max_new_tokens: int) -> Generation:
        """Greedy decoding with one adapter active."""
        row = GenRow(adapter, self.prompt(head, body, max_new_tokens), max_new_tokens)
        return self.generate_many([row])[0]

    def generate_many(self, rows: Sequence[GenRow]) -> list[Generation]:
        """Greedy decoding of many rows together, each with its own adapter (see decoding)."""
        return generate_rows(self.base, rows)

    def generate_each(
        self, rows: Sequence[GenRow], between: Callable[[], bool] | None = None
    ) -> list[Generation | Exception]:
        """`generate_many`, where a row that fails is retried alone and fails alone (its
        exception in its place); `between()` may run between decoding steps."""
        return generate_each(self.base, rows, between)

    def answer(self, label: str, messages: Sequence[dict], max_new_tokens: int) -> Generation:
        """The answer of expert `label`, which sees others' turns only as summaries."""
        head, body = prompts.answer_text(messages, label)
        return self.generate(self.experts[label], head, body, max_new_tokens)

    def summarize(self, user: str, answer: str, max_new_tokens: int) -> Generation:
        """A short summary of one turn, written by the summary adapter."""
        head, body = prompts.summary_text(self.spec.summary_prompt, user, answer)
        return self.generate(self.summarizer, head, body, max_new_tokens)

    def close(self) -> None:
        """Release this version's adapters; those no other version uses are unloaded."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.base.release(self.adapter_names())


def load_engine(base: SharedBase, spec: SetSpec, *, verify: Verify | None = None) -> Engine:
    """Check a set version completely, then load its adapters onto the base.

    Order: set consistency, base fingerprint, `verify(spec)` (blob hashes), label
    tokenization (none for an adapter served alone, which is never routed), then every new
    adapter is read and fitted on a meta skeleton. Only when all of that passed is anything
    injected into the serving model.
    """
    check_spec(spec)
    kind = "adapter" if spec.single else "set"
    base.check_fingerprint(spec.base_fingerprint, f"{kind} {spec.name} ({spec.id[:12]})")
    if verify is not None:
        verify(spec)
    label_ids = [] if spec.single else label_sequences(base.tokenizer, spec.labels)
    wanted = members(spec)
    for _ in range(3):  # a concurrent retire may unload a reused adapter; then prepare it too
        prepared = [
            base.prepare(f) for cid, f in wanted.items() if not base.has(adapter_name(cid))
        ]
        if base.acquire(prepared, [adapter_name(cid) for cid in wanted]):
            return Engine(base, spec, label_ids)
    raise RuntimeError("adapters kept being unloaded while staging")  # pragma: no cover


def open_engine(base_dir: str, spec: SetSpec, *, verify: Verify | None = None) -> Engine:
    """Load a base folder and one set version on it (for one-off work such as route-eval)."""
    return load_engine(SharedBase.load(base_dir), spec, verify=verify)

"""The `LoRAResolver` vLLM asks for an adapter it has not loaded: `MintResolver`.

A request for `model="LINE@REV"` reaches `resolve_lora(base, "LINE@REV")` once (vLLM keeps
what it returns under that name). The resolver fetches the version through `AdapterSource`
(verified, checked against the served base) and returns a `LoRARequest` named
`LINE@<full commit id>`: what vLLM loads is named by its content, and the response's `model`
says which commit answered.

A name that moves (a channel, a line's head) is followed (`Follower`), and what it serves is
reported to the repository or registry (`PluginFleet`). When it names another commit, the new
commit is fetched and verified first: refused, the old version serves on and the refusal is
reported; ready, the entry vLLM keeps for the name asked is retired, as `/v1/unload_lora_adapter`
retires it, under vLLM's own lock for that name: the next request resolves it anew and loads
the new commit under its own name. Nothing is reloaded in place under an old name, so no
prefix-cache block computed with old weights can be reused for new ones; requests already
running on the old version finish on it.

What the resolver refuses (an unknown revision, a token that may not read the line, another
base, bytes that do not verify) answers the client with a 4xx and one line, and nothing is
loaded or cached.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import weakref
from collections.abc import Mapping
from http import HTTPStatus

from vllm.exceptions import GracefulHTTPError
from vllm.lora.request import LoRARequest
from vllm.lora.resolver import LoRAResolver, LoRAResolverRegistry

from mint.errors import MintError, Unauthenticated
from mint.ids import vllm_name
from mint.store.errors import StoreError
from mint.vllm.adapters import AdapterSource, split_name
from mint.vllm.fleet import PluginFleet
from mint.vllm.follow import Follower

log = logging.getLogger("vllm.plugins.mint")  # under vLLM's own log handlers


class MintResolver(LoRAResolver):
    """Resolves `LINE@REV` names from the repository or registry in MINT_REPO."""

    def __init__(self, env: Mapping[str, str] = os.environ, source: AdapterSource | None = None):
        self.env = dict(env)
        self._source = source
        self._follower: Follower | None = None
        self._fleet: PluginFleet | None = None
        self._lock = threading.Lock()
        self._owners: dict[str, tuple[weakref.ref, asyncio.AbstractEventLoop]] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> MintResolver:
        return cls(env)

    @property
    def source(self) -> AdapterSource:
        """The repository, opened on first use (vLLM loads plugins in every process)."""
        with self._lock:
            if self._source is None:
                self._source = AdapterSource.from_env(self.env)
            return self._source

    @property
    def follower(self) -> Follower:
        source = self.source
        with self._lock:
            if self._follower is None:
                self._follower = self._make_follower(source)
            return self._follower

    @property
    def fleet(self) -> PluginFleet:
        """What this server serves, reported (made on first use, as the source)."""
        source = self.source
        with self._lock:
            if self._fleet is None:
                self._fleet = PluginFleet(source, self.env)
            return self._fleet

    def _make_follower(self, source: AdapterSource) -> Follower:
        repo, stream = source.repo, None
        if getattr(repo, "is_remote", False):
            from mint.remote.events import EventStream

            stream = EventStream(repo.url, repo.token, tail=True)
        interval = float(self.env.get("MINT_VLLM_POLL") or 1.0)
        return Follower(source.commit_of, self._moved, interval=interval, stream=stream)

    async def resolve_lora(self, base_model_name: str, lora_name: str) -> LoRARequest | None:
        parts = split_name(lora_name)
        if parts is None:
            return None  # not a mint name: another resolver's
        owner = serving_models(sys._getframe(1), self)  # before the first await
        try:
            resolved = await asyncio.to_thread(self.source.fetch, base_model_name, lora_name)
        except (MintError, StoreError) as exc:
            raise refusal(lora_name, exc) from None
        except Exception as exc:  # noqa: BLE001 - the client gets a 503, never a traceback
            log.exception("resolving %s", lora_name)
            why = f"mint could not resolve {lora_name}: {type(exc).__name__}: {exc}"
            raise GracefulHTTPError(why, HTTPStatus.SERVICE_UNAVAILABLE) from None
        if resolved.moves:
            if owner is None:
                log.warning(
                    "%s will not follow its moves: vLLM's model table not found", lora_name
                )
            else:
                self._owners[lora_name] = (weakref.ref(owner), asyncio.get_running_loop())
                self.follower.watch(lora_name, parts[0], parts[1], resolved.commit)
            self.fleet.serving(lora_name, resolved.commit, base_model_name)
        log.info("%s is %s (%s)", lora_name, resolved.name, resolved.path)
        return LoRARequest(lora_name=resolved.name, lora_int_id=1, lora_path=resolved.path)

    def _moved(self, asked: str, old: str, new: str) -> None:
        """ASKED now names NEW: once NEW is fetched and verified, retire vLLM's entry for it,
        in vLLM's event loop; refused, keep it (OLD serves on) and follow the name still."""
        line, rev = split_name(asked)
        ready = self.fleet.staged(asked, new)
        self.follower.watch(asked, line, rev, new if ready else old)
        if not ready:
            return
        owner_ref, loop = self._owners.pop(asked, (None, None))
        owner = owner_ref() if owner_ref is not None else None
        if owner is None or loop is None or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(retire(owner, asked, vllm_name(line, old)), loop)
        future.add_done_callback(_log_failure)

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
        if self._fleet is not None:
            self._fleet.close()


async def retire(models, asked: str, old_name: str) -> bool:
    """Drop vLLM's entry for ASKED if it still holds OLD_NAME (what `/v1/unload_lora_adapter`
    does, under the same lock): the next request for ASKED resolves it again."""
    async with models.lora_resolver_lock[asked]:
        held = models.lora_requests.get(asked)
        if held is None or held.lora_name != old_name:
            return False
        del models.lora_requests[asked]
    log.info("%s retired (%s); the next request resolves it again", asked, old_name)
    return True


def serving_models(frame, resolver: LoRAResolver):
    """vLLM's table of served adapters (`OpenAIServingModels`) that asks RESOLVER: the caller
    of `resolve_lora`, else found among live objects."""
    for _ in range(4):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if _is_table_of(candidate, resolver):
            return candidate
        frame = frame.f_back
    for candidate in gc.get_objects():
        if _is_table_of(candidate, resolver):
            return candidate
    return None


def _is_table_of(candidate, resolver) -> bool:
    try:
        return (
            isinstance(getattr(candidate, "lora_requests", None), dict)
            and hasattr(candidate, "lora_resolver_lock")
            and any(r is resolver for r in getattr(candidate, "lora_resolvers", ()))
        )
    except Exception:  # noqa: BLE001 - gc hands out objects of every kind
        return False


def refusal(name: str, exc: Exception) -> GracefulHTTPError:
    """The 4xx a client gets for a name mint refuses, with mint's one line (a 502 when the
    bytes mint holds do not verify: the fault is upstream of vLLM, not the client's)."""
    if isinstance(exc, StoreError):
        status = HTTPStatus.BAD_GATEWAY
    elif isinstance(exc, Unauthenticated):
        status = HTTPStatus.UNAUTHORIZED
    elif isinstance(exc, PermissionError):
        status = HTTPStatus.FORBIDDEN
    elif isinstance(exc, LookupError):
        status = HTTPStatus.NOT_FOUND
    elif isinstance(exc, ConnectionError):
        status = HTTPStatus.SERVICE_UNAVAILABLE
    else:
        status = HTTPStatus.BAD_REQUEST
    log.warning("refused %s: %s", name, exc)
    return GracefulHTTPError(f"mint refused {name}: {exc}", status)


def _log_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("retiring a moved adapter: %s", future.exception())


def register_resolver(env: Mapping[str, str] = os.environ) -> None:
    """Register `MintResolver` as vLLM's resolver `mint` (when MINT_REPO is set)."""
    if not env.get("MINT_REPO"):
        log.info("MINT_REPO is not set: mint's LoRA resolver is not registered")
        return
    LoRAResolverRegistry.register_resolver("mint", MintResolver.from_env(env))

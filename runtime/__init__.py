"""The MoL runtime: loads a set onto a frozen base, routes, answers and serves.

Modules, from the bottom up:

- `loader`: `SharedBase`, the frozen base and the one PeftModel holding every loaded adapter;
  adapters are checked completely before anything is injected.
- `router`, `prompts`: constrained L0 routing over the set's labels (a batch of conversations
  scored together, each prompt run once), and the text each stage sees.
- `decoding`: greedy decoding of many rows at once, each with its own adapter (PEFT's
  mixed-adapter batch), and `TextStream`, the text deltas of a streamed answer.
- `engine`: `load_engine(base, spec)` -> `Engine`, one set version: route, answer, summarise.
- `pipeline`: `run_turns(engine, jobs)` -> `TurnResult`s, a batch of turns stage by stage
  (route, answer, summary, latencies); `run_turn` is a batch of one.
- `evaluate`: `evaluate_routes(engine, records)` -> `RouteEval` (accuracy, confusion matrix).
- `batching`: `Scheduler`, which gathers concurrent turns into batches (a window, a size
  limit), and `Ticket`, one submitted turn (its future, its events, `cancel()`).
- `residency`: the CPU tier, versions kept loaded after they served (LRU, bounded in adapters).
- `runtime`: `Runtime`, the serving slot with stage/swap (hot swap), leases per request, the
  tier, a canary's split and channel following; `Runtime.submit(...)` / `Runtime.turn(...)` are
  the way a served request runs.
- `chunks`: OpenAI's chat.completion and chat.completion.chunk objects, as server-sent events.
- `server`: the OpenAI-compatible HTTP server (`create_app`, `serve`, `ServerThread`), over
  `Runtime.submit`, streaming or not; it refuses bodies that are too large or nest too deeply
  with a 4xx.
- `metrics`: counters and histograms rendered as Prometheus text.
- `service`: the runtime over a repository, through `mint.api`: `open_runtime(repo, rev)` (what
  `mint serve` runs) and `route_eval`. Every blob a set uses, prompts included, is re-hashed
  before the set is staged (`store_verifier`).

Importing a module loads neither torch, transformers nor peft; they load on first use.
"""

"""The MoL runtime: loads a set onto a frozen base, routes, answers and serves.

Modules, from the bottom up:

- `loader`: `SharedBase`, the frozen base and the one PeftModel holding every loaded adapter;
  adapters are checked completely before anything is injected.
- `router`, `prompts`: constrained L0 routing over the set's labels, and the text each stage sees.
- `engine`: `load_engine(base, spec)` -> `Engine`, one set version: route, answer, summarise.
- `pipeline`: `run_turn(engine, messages)` -> `TurnResult` (route, answer, summary, latencies).
- `evaluate`: `evaluate_routes(engine, records)` -> `RouteEval` (accuracy, confusion matrix).
- `swap`: `Runtime`, the serving slot with stage/swap, leases per request and channel following;
  `Runtime.turn(messages, model=...)` is the one way a served request runs.
- `server`: the OpenAI-compatible HTTP server (`create_app`, `serve`, `ServerThread`), over
  `Runtime.turn`; it refuses bodies that are too large or nest too deeply with a 4xx.
- `metrics`: counters and histograms rendered as Prometheus text.
- `service`: the runtime over a repository, through `mint.api`: `open_runtime(repo, rev)` (what
  `mint serve` runs) and `route_eval`. Every blob a set uses, prompts included, is re-hashed
  before the set is staged (`store_verifier`).

Importing a module loads neither torch, transformers nor peft; they load on first use.
"""

"""The MoL runtime: loads a set onto a frozen base, routes, answers and serves.

Modules, from the bottom up:

- `loader`: `SharedBase`, the frozen base and the one PeftModel holding every loaded adapter;
  adapters are checked completely before anything is injected.
- `router`, `prompts`: constrained L0 routing over the set's labels, and the text each stage sees.
- `engine`: `load_engine(base, spec)` -> `Engine`, one set version: route, answer, summarise.
- `pipeline`: `run_turn(engine, messages)` -> `TurnResult` (route, answer, summary, latencies).
- `evaluate`: `evaluate_routes(engine, records)` -> `RouteEval` (accuracy, confusion matrix).
- `swap`: `Runtime`, the serving slot with stage/swap, leases per request and channel following.
- `server`: the OpenAI-compatible HTTP server (`create_app`, `serve`, `ServerThread`).
- `metrics`: counters and histograms rendered as Prometheus text.


Importing this package imports none of torch, transformers or starlette; the modules do.
"""

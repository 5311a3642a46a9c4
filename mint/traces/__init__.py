"""Learning from deployment: what the runtime served (traces), what users thought of it
(feedback), and exports of both as datasets kept in the store.

`records` writes and reads traces and feedback; `export` writes them out as JSONL (OpenAI chat
fine-tuning records, or routing examples as `mint route-eval` reads them) and records each
export as a blob whose sha256 names it.
"""

"""A contract's evaluator: its command run with a deadline, its JSON output parsed (the run
on a checkout, local or from a registry, is `mint.porcelain.evaluate`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from mint.errors import EvaluationFailed

# A command whose first word is one of these runs in the interpreter that runs mint, not in
# whichever `python` the PATH finds first: mint run by its full path from a virtual environment
# (as cron and CI run it) finds its own packages, and the evaluator with them.
INTERPRETER_NAMES = ("python", "python3")


def evaluator_argv(argv: list[str]) -> list[str]:
    """ARGV with a first word `python` or `python3` replaced by the running interpreter."""
    if argv and argv[0] in INTERPRETER_NAMES and sys.executable:
        return [sys.executable, *argv[1:]]
    return list(argv)


def run_command(argv: list[str], timeout: float, cwd=None, env: dict | None = None) -> str:
    """ARGV's standard output (its `python` the running interpreter), with a deadline; it runs
    in CWD (default: here) with ENV (default: ours)."""
    argv = evaluator_argv(argv)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            cwd=cwd,
            env=env,
        )
    except OSError as exc:
        raise EvaluationFailed(
            f"evaluator could not start: {exc.strerror or exc}: {argv[0]}"
        ) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise EvaluationFailed(
            f"evaluator ran past its timeout of {timeout:g}s and was killed; nothing recorded"
        ) from None
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-1:] or [""]
        raise EvaluationFailed(
            f"evaluator failed with exit status {proc.returncode}: {tail[0][:200]}; nothing "
            "recorded"
        )
    return out


def parse_metrics(out: str, body: dict) -> dict:
    """One JSON object on stdout (the whole output, or else its last non-empty line)."""
    candidates = [out.strip()] + [l for l in reversed(out.strip().splitlines()) if l.strip()][:1]
    for text in candidates:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            wanted = {m["name"] for m in body["metrics"]}
            missing = sorted(wanted - set(value))
            if missing:
                raise EvaluationFailed(
                    f"evaluator output misses metric {missing[0]!r}; nothing recorded"
                )
            return {k: value[k] for k in wanted}
    raise EvaluationFailed(
        "evaluator printed no valid JSON object of metrics on stdout; nothing recorded"
    )


def hash_data(path: str | None) -> str | None:
    if not path:
        return None
    from mint.store import sha256_file

    try:
        return sha256_file(path)
    except OSError as exc:
        raise EvaluationFailed(f"evaluator data {path} cannot be read: {exc.strerror}") from None

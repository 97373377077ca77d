"""minimal_repro.py: the finding as a maintainer reads it, a script of at most 60 lines.

repro_full.py replays any finding with servefuzz's whole reproduction rule (streams cut mid-prefill,
cache probes, constraints, a server it starts and restarts, the sequential test): about 1,800
lines no maintainer reads. Most findings need none of that once shrunk: a few requests at their
offsets, and each watched request compared with its own answer alone on a flushed cache. That is
this script: the standard library only (urllib, json, a thread pool), the exact bodies servefuzz's
adapter sends (`repro.replay_plan`, so both scripts send the same bytes, one request a line), the
server command as a comment, the answers alone, the runs and the rate printed, exit 0 when a
watched request answered otherwise in some run, 1 when none did. A request that fails ends the
script with its error: it is never counted as an answer.

A request servefuzz streamed goes whole here (how an answer travels does not change what the
engine computes; the script's runs say whether the finding comes back so). Where the finding
needs more than that (a stream cut, a cache probe, a tenant's cached-token
allowance, a choice constraint, a crash or hang to wait for, n copies of one request, more
requests than fit MAX_LINES), there is no minimal form: `minimal_repro` says why, in one line, and repro_full.py stays the way to replay it.
The finding is data, never code: the plan goes in as a JSON text inside a `repr`'d literal.

    >>> from servefuzz.anomaly import Anomaly, Oracle, Verdict
    >>> from servefuzz.finding import Finding
    >>> from servefuzz.server_facts import TargetInfo
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 2), RequestSpec("r02", 3.0, (7, 8), 2)))
    >>> f = Finding(3, 1, sc, TargetInfo("sglang", "http://127.0.0.1:30000"),
    ...             (Anomaly(Oracle.ISOLATION, Verdict.CORRUPTION, "r02", "r02 diverged"),))
    >>> text, why = minimal_repro(f)
    >>> why is None and compile(text, "minimal_repro.py", "exec") is not None
    True
    >>> minimal_repro(Finding(3, 1, sc, TargetInfo("sglang", "http://127.0.0.1:30000"),
    ...                       (Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r02", "died"),)))[1]
    'a crash finding: its repro_full.py waits for the server to die; the minimal form compares answers only'
"""

from __future__ import annotations

import json
import string

from servefuzz.finding import Finding
from servefuzz.reports.repro import MODEL_DIR, model_files, replay_plan, served_command
from servefuzz.sanitize import one_line
from servefuzz.targets.base import ReproDialect, get_target_class

__all__ = ["MAX_LINES", "minimal_repro"]

_STREAM_KEYS = ("stream", "stream_options")
MAX_LINES = 60  # what a maintainer reads in one screen, the request data included (issue 54)

# Single blank lines between the functions: the whole script fits one screen (MAX_LINES), and a
# request's body is one line of data however long its prompt.
_SCRIPT = string.Template('''#!/usr/bin/env python3
"""servefuzz finding ${name}: ${bug}.
Server, as servefuzz ran it: ${command}${model}
Run: python3 minimal_repro.py [BASE_URL] [RUNS] (default ${base_url} 10): the ${count} requests at their offsets \
on a flushed cache, RUNS times; at temperature 0, ${watched} must answer as alone.${streamed}"""
import json, sys, time, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor
URL = (sys.argv[1] if len(sys.argv) > 1 else "${base_url}").rstrip("/")
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
PATH, WATCH = ${path}, ${watch}  # WATCH: what answered otherwise under load when servefuzz found it

def post(path, body, answer=True):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read()) if answer else resp.read()
def get(path):
    return json.loads(urllib.request.urlopen(URL + path, timeout=30).read())
def empty_cache(path):  # a busy server refuses a flush while requests finish: try again
    for _ in range(50):
        try:
            return post(path, {}, answer=False)
        except urllib.error.HTTPError:
            time.sleep(0.1)
    sys.exit(f"{URL}{path} refused the flush 50 times")

${tokens}
${flush}

def run(ids):  # the requests named in `ids`, each at its offset, on a flushed cache: id -> token ids
    flush()
    out, t0 = {}, time.perf_counter()
    def send(r):
        time.sleep(max(0.0, r["offset_ms"] / 1000 - (time.perf_counter() - t0)))
        out[r["id"]] = tokens(post(PATH, r["body"]))
    with ThreadPoolExecutor(len(REQUESTS)) as pool:  # an error in a request ends the script, never counts
        list(pool.map(send, [r for r in REQUESTS if r["id"] in ids]))
    return out

def main():
    alone = {rid: run({rid})[rid] for rid in WATCH}
    print(f"expected (each alone): {alone}")
    wrong = 0
    for i in range(RUNS):
        got = run({r["id"] for r in REQUESTS})
        bad = {rid: got[rid] for rid in WATCH if got[rid] != alone[rid]}
        wrong += bool(bad)
        print(f"run {i + 1}/{RUNS}: {bad or 'every watched request as alone'}")
    print(f"{wrong}/{RUNS} runs answered otherwise than alone: {'REPRODUCED' if wrong else 'NOT REPRODUCED'}")
    return 0 if wrong else 1

REQUESTS = [json.loads(r) for r in (  # the exact bodies servefuzz sent, offsets in ms: data, not code
${literal}
)]
if __name__ == "__main__":
    sys.exit(main())  # exit 0: reproduced (some run answered otherwise); 1: not reproduced
''')


def minimal_repro(finding: Finding) -> tuple[str | None, str | None]:
    """The minimal script's text, or None and the one-line reason it has none (see above)."""
    plan = replay_plan(finding)
    why = _refusal(plan)
    if why is not None:
        return None, why
    speaks = getattr(get_target_class(finding.target.engine), "repro", None)
    if not isinstance(speaks, ReproDialect) or not speaks.minimal_tokens or not speaks.minimal_flush:
        return None, f"no cache flush the minimal form knows for the {plan['dialect']!r} dialect"
    # A streamed request goes whole: how the answer travels does not change what the engine
    # computes, and the runs below say whether the finding comes back without it.
    requests = [{"id": r["id"], "offset_ms": r["offset_ms"],
                 "body": {k: v for k, v in r["body"].items() if k not in _STREAM_KEYS}} for r in plan["requests"]]
    streamed = [r["id"] for r in plan["requests"] if r["body"].get("stream")]
    # One request a line: a repr'd JSON text each, so nothing in it can be code.
    literal = "\n".join(f"    {json.dumps(r, ensure_ascii=True, separators=(',', ':'))!r}," for r in requests)
    watch = list(plan["expected"])
    text = _SCRIPT.substitute(
        # Everything from the finding file goes in as a Python literal or through one_line in the
        # docstring (with its quotes and backslashes made inert), never as code.
        name=_doc(plan["name"]), bug=_doc(plan["bug"]), command=_doc(served_command(finding)),
        model=f" ({MODEL_DIR}: `python3 repro_full.py --write-model {MODEL_DIR}`, numpy only)" if model_files(finding) else "",
        base_url=_url(finding.target.base_url), count=len(requests),
        watched=_doc(", ".join(watch)), path=repr(plan["path"]), watch=repr(watch),
        tokens=speaks.minimal_tokens, flush=speaks.minimal_flush, literal=literal,
        streamed=f" {_doc(', '.join(streamed))}: streamed by servefuzz, whole here." if streamed else "",
    )
    lines = len(text.splitlines())
    if lines > MAX_LINES:
        return None, f"{len(requests)} requests make {lines} lines, more than the {MAX_LINES} of a minimal form"
    return text, None


def _refusal(plan: dict[str, object]) -> str | None:
    """Why the plan needs repro_full.py's machinery, or None when the minimal form can carry it."""
    if plan["expect_failure"]:
        return (f"a {plan['expect_failure']} finding: its repro_full.py waits for the server to die; "
                "the minimal form compares answers only")
    if not plan["expected"]:
        return "no request to watch"
    requests = plan["requests"]
    assert isinstance(requests, list)
    for r in requests:
        if r.get("cancel_after_ms") is not None or r.get("cancel_at_prefill") is not None:
            return f"{r['id']} is a stream cut on purpose: only repro_full.py cuts streams"
        if r.get("copies", 1) != 1:
            return f"{r['id']} goes as {r['copies']} copies (n > 1 at temperature 0 on this engine): only repro_full.py sends those"
    if plan["probes"]:
        return "a cache-state finding: its warm and primed probes are repro_full.py's"
    if plan["expect_cached"]:
        return "an isolation breach: the cached-token allowance is repro_full.py's check"
    if plan["choices"]:
        return "a constrained request: the constraint check is repro_full.py's"
    return None


def _doc(text: object) -> str:
    """A finding-file string for the script's docstring: one line, no quote or backslash that
    could end the docstring or start an escape."""
    return one_line(text).replace("\\", "/").replace('"', "'")


def _url(text: str) -> str:
    """The finding's base URL as the default (a string literal's contents, so nothing can end it)."""
    return _doc(text).replace("'", "%27")

"""The tiny-pool hang on SGLang 0.5.10.post1 against the code reading's predictions (/tmp/hang-reading.md)."""
import dataclasses, json, sys, time
from pathlib import Path
from servefuzz.finding import load_finding
from servefuzz.launcher import Launch
from servefuzz.oracles.judge import Expectation
from servefuzz.runner import RunConfig
from servefuzz.servers import Replayer
from servefuzz.engine_flags import with_flags

f = load_finding(Path("/work/main/docs/findings/sglang-cpu-tiny-pool-hang/finding.json"))
version, runs = sys.argv[1], int(sys.argv[2])
rows = sys.argv[3].split(",")
base = Launch.resolve(f"sglang-cpu@{version}", f.target)
print("argv:", " ".join(base.argv), flush=True)
out = Path("/tmp/hangx")
for row in rows:
    launch, scenario = base, f.scenario
    if row == "overlap-off":
        launch = base.with_changes(with_flags(base.argv, ["--disable-overlap-schedule"]), base.env, base.target_opts)
    elif row == "radix-off":
        launch = base.with_changes(with_flags(base.argv, ["--disable-radix-cache"]), base.env, base.target_opts)
    elif row == "pool-4096":
        launch = base.with_changes(with_flags(base.argv, ["--max-total-tokens", "4096"]), base.env, base.target_opts)
    elif row.startswith("two"):
        # two concurrent n = 2 requests of the finding (r02 and r02_b), optionally one running at a time
        keep = [r for r in f.scenario.requests if r.id in ("r02", "r02_b")]
        scenario = dataclasses.replace(f.scenario, requests=tuple(keep))
        if row == "two-mrr1":
            launch = base.with_changes(with_flags(base.argv, ["--max-running-requests", "1"]), base.env, base.target_opts)
    elif row == "n1":
        scenario = dataclasses.replace(f.scenario, requests=tuple(dataclasses.replace(r, n=1) for r in f.scenario.requests))
    began = time.monotonic()
    log = out / f"server-{version}-{row}.log"
    with Replayer(launch, config=RunConfig(request_timeout_s=30.0), log_path=log) as bench:
        rep = bench.reproduce(scenario, Expectation.of(f), runs)
    starts = log.read_text().count("--- servefuzz")
    line = {"version": version, "row": row, "rate": rep.rate, "lost": rep.lost, "starts": starts,
            "seconds": round(time.monotonic() - began, 1)}
    print(json.dumps(line), flush=True)
    with open(out / "rows.jsonl", "a") as fh:
        fh.write(json.dumps(line) + "\n")

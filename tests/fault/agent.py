"""Agent processes for the fault suite: ``python -m tests.fault.agent append|read ...``.

``append`` writes one JSON line per acknowledged message (what the agent was told), so
the audit can hold both tiers to it. ``read`` calls ``context()`` in a loop and reports
every context over its budget or with a hole in its seqs.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from hermes_redis import SessionMemory

WORDS = ["we", "decided", "to", "use", "PostgreSQL", "16", "for", "the", "auth", "service;",
         "the", "refresh", "token", "lives", "7", "days", "and", "Priya", "owns", "the",
         "rollout", "in", "app/auth.py", "while", "the", "cache", "stays", "in", "Redis", "7"]


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def append(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    sids = args.sessions.split(",")
    with SessionMemory.from_config(args.config) as mem, Path(args.out).open("w") as out:
        for i in range(args.count):
            sid = rng.choice(sids)
            roll = rng.random()
            kwargs: dict[str, object] = {}
            if roll < 0.45:
                role, body = "user", f"[{args.seed}:{i}] " + text(rng, rng.randint(3, 40))
            elif roll < 0.85:
                role, body = "assistant", f"[{args.seed}:{i}] " + text(rng, rng.randint(5, 120))
                if rng.random() < 0.2:
                    kwargs["tool_calls"] = [{"name": "read_file", "args": {"path": "app/auth.py"}}]
                    kwargs["file_refs"] = ["app/auth.py"]
            elif roll < 0.99:
                role, body = "tool", f"[{args.seed}:{i}] " + text(rng, rng.randint(5, 200))
            else:  # a tool result over tool_result_max_tokens: capped hot, whole in the archive
                role, body = "tool", f"[{args.seed}:{i}] " + text(rng, 3000)
            m = mem.append(sid, role, body, **kwargs)  # type: ignore[arg-type]
            out.write(json.dumps([m.session_id, m.message_id, m.seq, m.token_count]) + "\n")
            out.flush()


def read(args: argparse.Namespace) -> None:
    sids = args.sessions.split(",")
    stop_file = Path(args.stop)
    report = {"calls": 0, "over_budget": 0, "holes": 0, "max_tokens": 0, "errors": []}
    with SessionMemory.from_config(args.config) as mem:
        deadline = time.monotonic() + args.max_seconds
        while not stop_file.exists() and time.monotonic() < deadline:
            for sid in sids:
                ctx = mem.context(sid, budget=args.budget)
                report["calls"] += 1
                report["max_tokens"] = max(report["max_tokens"], ctx.tokens)
                if ctx.tokens > args.budget:
                    report["over_budget"] += 1
                seqs = [m.seq for m in ctx.messages]
                if seqs and seqs != list(range(seqs[0], seqs[0] + len(seqs))):
                    report["holes"] += 1
                    report["errors"].append(f"{sid}: seqs {seqs[:3]}..{seqs[-3:]}")
            time.sleep(0.01)  # a reader, not a busy loop: leave the workers some CPU
    Path(args.out).write_text(json.dumps(report))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.agent")
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("append")
    a.add_argument("--config", required=True)
    a.add_argument("--sessions", required=True)
    a.add_argument("--count", type=int, default=1000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--out", required=True)
    r = sub.add_parser("read")
    r.add_argument("--config", required=True)
    r.add_argument("--sessions", required=True)
    r.add_argument("--budget", type=int, default=1500)
    r.add_argument("--stop", required=True)
    r.add_argument("--max-seconds", type=float, default=600)
    r.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    {"append": append, "read": read}[args.cmd](args)


if __name__ == "__main__":
    main(sys.argv[1:])

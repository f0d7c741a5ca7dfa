"""A short conversation through the API on the configured backend (embedded Redis by default):
what an agent process does, then what the worker does, then what goes to the model."""

from __future__ import annotations

import sys
from pathlib import Path

from hermes_redis import SessionMemory
from workers.worker import run

TURNS = [
    ("帮我写一个 FastAPI 的用户认证接口", "好的：用 JWT，access token 30 min，refresh token 7 d。"),
    ("密码怎么存？", "We decided to use bcrypt + salt; see app/auth/security.py."),
    ("数据库呢？", "项目用 PostgreSQL 16，不用 MySQL。Schema in migrations/001_users.sql."),
    ("Who reviews the PR?", "Priya reviews it on Friday; open item: rate limiting?"),
]


def main() -> None:
    config = Path(__file__).resolve().parent.parent / "config.yml"
    mem = SessionMemory.from_config(config)
    sid = mem.create_session(user_id="demo")
    for _ in range(4):
        for user, reply in TURNS:
            mem.append(sid, "user", user)
            mem.append(sid, "assistant", reply)
    mem.remember("demo", "项目用 PostgreSQL，不用 MySQL", session_id=sid)
    print(f"session {sid}: appended {mem.info(sid).message_count} messages to the hot tier")
    if mem.hot.name == "redis":
        run(mem, burst=True)  # what `hermes-redis worker` does continuously
    else:
        mem.flush(sid)
    mem.compact(sid)
    info = mem.info(sid)
    print(f"archived: {info.archived_count}  hot: {info.hot_count}  summary covers seq 1..{info.summary_seq}")
    ctx = mem.context(sid)
    print(f"context: {ctx.tokens} tokens of {ctx.window} ({ctx.usage:.2%}), {len(ctx.messages)} messages")
    for chat in ctx.as_chat():
        print(f"  [{chat['role']}] {chat['content'][:200]}")
    hits = mem.search("认证", user_id="demo")
    print(f"search '认证': {len(hits)} hit(s); first: {hits[0].snippet if hits else '-'}")
    print(f"\nnext: scripts/run.sh info {sid[:8]}   |   scripts/run.sh session list")
    mem.close()


if __name__ == "__main__":
    sys.exit(main())

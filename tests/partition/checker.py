"""After the heal: what the agents were acknowledged against what the server and the archive
hold (issue 35 part 8).

* **lost**: an acknowledged ``message_id`` the server does not return (or, in the archive
  check, the archive does not hold once the backlog is flushed);
* **duplicated**: a stored message beyond its first copy, by ``message_id`` or by content
  (each message an agent sends has its own text, so a retry stored twice under two ids is
  caught too);
* **moved**: an acknowledged message stored under another seq than the one acknowledged;
* **gaps**: seqs missing from 1..max of a session;
* **recovery**: per agent session, the time from the heal to its first acknowledgement after
  it; the worst of them (every agent keeps one append in flight, so this is when the last of
  them got through)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Records:
    """What the agents' ``client.py`` wrote."""

    sessions: list[str] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    unacked: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, paths: Iterable[Path]) -> Records:
        out = cls()
        for path in paths:
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:  # blank, or the last line while it is being written
                    continue
                kind = rec["kind"]
                if kind == "session":
                    out.sessions.append(rec["sid"])
                elif kind == "ack":
                    out.acks.append(rec)
                elif kind == "error":
                    out.errors.append(rec)
                elif kind == "rejected":
                    out.rejected.append(rec)
                elif kind == "unacked":
                    out.unacked.append(rec)
        return out

    def sent_ids(self) -> set[str]:
        """Every id an agent tried: acknowledged, failed or left in flight."""
        return ({r["mid"] for r in self.acks} | {r["mid"] for r in self.errors}
                | {r["mid"] for r in self.unacked})


@dataclass
class Verdict:
    acked: int
    stored: int
    lost: list[str]
    duplicated: int
    moved: list[tuple[str, int, int]]  # (message_id, acknowledged seq, stored seq)
    gaps: int
    strangers: int  # stored ids no agent ever sent
    in_doubt_stored: int  # unacknowledged (failed or in flight) but stored: allowed
    copies: list[tuple[str, str, list[int]]] = field(default_factory=list)  # (sid, id, seqs) stored twice

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.moved or self.gaps or self.strangers)

    def brief(self) -> dict[str, int]:
        return {"acked": self.acked, "stored": self.stored, "lost": len(self.lost),
                "duplicated": self.duplicated, "moved": len(self.moved), "gaps": self.gaps,
                "strangers": self.strangers, "in_doubt_stored": self.in_doubt_stored}


Row = tuple[int, str, str]  # (seq, message_id, content) as read back


def judge(records: Records, stored: Mapping[str, Sequence[Row]]) -> Verdict:
    """``stored``: per session, its rows as read back."""
    acked = {r["mid"]: (r["sid"], int(r["seq"])) for r in records.acks}
    sent = records.sent_ids()
    ids = Counter(mid for rows in stored.values() for _, mid, _ in rows)
    texts = Counter((sid, text) for sid, rows in stored.items() for _, _, text in rows)
    where: dict[str, list[tuple[str, int]]] = {}
    for sid, rows in stored.items():
        for seq, mid, _ in rows:
            where.setdefault(mid, []).append((sid, seq))
    lost = sorted(mid for mid in acked if mid not in ids)
    moved = sorted((mid, seq, where[mid][0][1]) for mid, (sid, seq) in acked.items()
                   if mid in where and (sid, seq) not in where[mid])
    gaps = 0
    for rows in stored.values():
        seqs = {seq for seq, _, _ in rows}
        if seqs:
            gaps += max(seqs) - len(seqs)
    copies = sorted((sid, mid, sorted(seq for s2, seq in spots if s2 == sid))
                    for mid, spots in where.items() if len(spots) > 1 for sid in {spots[0][0]})
    text_ids: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for sid, rows in stored.items():
        for seq, mid, text in rows:
            text_ids.setdefault((sid, text), []).append((seq, mid))
    copies += sorted((sid, "+".join(m for _, m in got), sorted(q for q, _ in got))
                     for (sid, _), got in text_ids.items()
                     if len(got) > 1 and len({m for _, m in got}) > 1)
    return Verdict(
        copies=copies, acked=len(acked), stored=sum(ids.values()), lost=lost,
        duplicated=max(sum(n - 1 for n in ids.values()), sum(n - 1 for n in texts.values())),
        moved=moved, gaps=gaps,
        strangers=sum(1 for mid in ids if mid not in sent),
        in_doubt_stored=sum(1 for mid in ids if mid in sent and mid not in acked))


def recovery(records: Records, heal: float) -> float:
    """Seconds from ``heal`` until every agent session had an acknowledgement after it."""
    firsts: dict[str, float] = {}
    for rec in records.acks:
        if rec["t"] >= heal:
            firsts[rec["sid"]] = min(firsts.get(rec["sid"], rec["t"]), rec["t"])
    missing = set(records.sessions) - set(firsts)
    if missing:
        raise AssertionError(f"{len(missing)} agent sessions had no acknowledged append after "
                             f"the heal: {sorted(missing)}")
    return max(firsts.values()) - heal


def latency(records: Records, start: float, end: float) -> dict[str, float]:
    """Acknowledged appends begun in [start, end): how many, and their worst latency (first
    attempt to acknowledgement, retries included)."""
    inside = [r["t"] - r["first"] for r in records.acks if start <= r["first"] < end]
    return {"acks_in_window": len(inside), "max_latency_s": round(max(inside, default=0.0), 2)}

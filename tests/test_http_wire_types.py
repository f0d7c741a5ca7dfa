"""The HTTP response schemas are the core wire types: each model has exactly the fields its
core type's ``as_dict`` sends, with types that accept what it sends, and a field added to a
core dataclass is in the derived model with no second edit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from hermes_redis.core.models import (
    CompactResult,
    Context,
    Memory,
    Message,
    SearchHit,
    SessionInfo,
)
from hermes_redis.server.schemas import (
    CompactionOut,
    ContextOut,
    HitOut,
    MemoryOut,
    MessageOut,
    SessionOut,
    wire_model,
)

MESSAGE = Message("s1", 3, "assistant", "hi", 2, tool_calls='[{"name": "ls"}]',
                  file_refs=("a.py",), memory_refs=("m1",), created_at=12.5,
                  item_json='{"type": "message", "n": [1, 2]}')
PLAIN = Message("s1", 4, "user", "x", 1)  # no tool calls, no item: both sent as null
SESSION = SessionInfo("s1", "alice", "t", 1.0, 2.0, 30, 4, "active", summary="so far",
                      summary_seq=2, last_seq=4, flushed_seq=1, hot_count=3, archived_count=1,
                      ttl_left=None, tier="hot")
CONTEXT = Context("s1", (MESSAGE, PLAIN), "so far", ("likes tea",), 40, 100, 200, 3,
                  opening=(PLAIN,), recalled=())
MEMORY = Memory("m1", "alice", "likes tea", 5.0, session_id="s1", seq=2, kind="trigger",
                topic="drink", superseded_by=None, token_count=3)
HIT = SearchHit("s1", 3, "assistant", "…hi…", "t", 1.5, tier="hot")

CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (MessageOut, MESSAGE.as_dict()),
    (MessageOut, PLAIN.as_dict()),
    (SessionOut, SESSION.as_dict()),
    (ContextOut, CONTEXT.as_dict()),
    (MemoryOut, MEMORY.as_dict()),
    (HitOut, HIT.as_dict()),
    (CompactionOut, dict(CompactResult(4, 2, 30, 5).__dict__)),  # what /compact sends
]


@pytest.mark.parametrize(("model", "sent"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_each_response_model_is_what_as_dict_sends(model: type[BaseModel],
                                                   sent: dict[str, Any]) -> None:
    assert set(model.model_fields) == set(sent)
    assert model.model_validate(sent).model_dump(mode="json") == sent


def test_every_field_is_required_because_as_dict_sends_them_all() -> None:
    for model, _ in CASES:
        schema = model.model_json_schema(mode="serialization")
        assert sorted(schema["required"]) == sorted(schema["properties"]), model.__name__


def test_a_field_added_to_a_core_type_is_on_the_model_without_a_second_edit() -> None:
    @dataclass(frozen=True)
    class Grown:
        session_id: str
        turns: tuple[Message, ...]
        mood: str | None = None

        @property
        def size(self) -> int:
            return len(self.turns)

    @wire_model(Grown, properties=("size",))
    class GrownOut(BaseModel):
        pass

    schema = GrownOut.model_json_schema(mode="serialization")
    assert set(schema["properties"]) == {"session_id", "turns", "mood", "size"}
    assert schema["properties"]["turns"] == {"items": {"$ref": "#/$defs/MessageOut"},
                                             "title": "Turns", "type": "array"}
    assert schema["properties"]["size"]["type"] == "integer"
    with pytest.raises(ValueError, match="mood"):
        GrownOut.model_validate({"session_id": "s", "turns": [], "size": 0})

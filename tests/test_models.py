import pytest

from hermes_redis.core.errors import ValidationError
from hermes_redis.core.models import (
    SEQ_OFFSET,
    Message,
    check_content,
    check_refs,
    check_role,
    check_session_id,
    check_tool_calls,
    new_message_id,
)


def test_wire_roundtrip_keeps_every_field():
    m = Message("s1", 7, "tool", "结果 ok", 3, tool_calls='[{"name":"ls"}]',
                file_refs=("a.py",), memory_refs=("mem_1",), created_at=12.5)
    assert Message.unpack("s1", m.pack()) == m


def test_seq_sits_at_the_fixed_offset_the_script_stamps():
    raw = Message("s", 0, "user", "x", 1).pack()
    stamped = raw[:SEQ_OFFSET] + (2**40 + 5).to_bytes(8, "big") + raw[SEQ_OFFSET + 8 :]
    assert Message.unpack("s", stamped).seq == 2**40 + 5


def test_wire_carries_a_version():
    raw = bytearray(Message("s", 1, "user", "x", 1).pack())
    raw[1] = 99
    with pytest.raises(ValueError, match="wire version"):
        Message.unpack("s", bytes(raw))


def test_message_ids_are_unique_and_time_ordered():
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == 2000
    assert [i[:12] for i in ids] == sorted(i[:12] for i in ids)


@pytest.mark.parametrize("sid", ["", "a*", "a{b}", "a:b", "a b", "x" * 65, None, 5, "ü"])
def test_bad_session_ids(sid):
    with pytest.raises(ValidationError, match="session id"):
        check_session_id(sid)


def test_good_session_id():
    assert check_session_id("a1_B-" + "x" * 59) == "a1_B-" + "x" * 59


def test_role_content_and_json_fields():
    with pytest.raises(ValidationError, match="unknown role"):
        check_role("robot")
    with pytest.raises(ValidationError, match="empty"):
        check_content("   ", 100)
    with pytest.raises(ValidationError, match="over the limit"):
        check_content("é" * 60, 100)
    with pytest.raises(ValidationError, match="UTF-8"):
        check_content(b"\xff\xfe", 100)
    with pytest.raises(ValidationError, match="text"):
        check_content(42, 100)
    with pytest.raises(ValidationError, match="JSON"):
        check_tool_calls("[{")
    with pytest.raises(ValidationError, match="list"):
        check_tool_calls("42")
    with pytest.raises(ValidationError, match="list of strings"):
        check_refs([1, 2], "file_refs")
    with pytest.raises(ValidationError, match="JSON"):
        check_refs("[oops", "file_refs")
    assert check_tool_calls([{"id": 1}]) == '[{"id":1}]'
    assert check_refs('["a"]', "file_refs") == ("a",)


@pytest.mark.parametrize("bad", ["a\ud888b", "nul\x00", "x" * 5000])
def test_refs_must_be_valid_short_text(bad):
    with pytest.raises(ValidationError, match=r"file_refs\[1\]"):
        check_refs(["ok.py", bad], "file_refs")

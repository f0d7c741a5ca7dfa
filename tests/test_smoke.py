def test_append_and_info(mem):
    sid = mem.create_session(user_id="alice")
    m = mem.append(sid, "user", "帮我写一个 FastAPI 的用户认证接口")
    assert m.seq == 1 and m.token_count > 0
    info = mem.info(sid)
    assert info.message_count == 1 and info.total_tokens == m.token_count

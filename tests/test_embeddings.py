"""Recall by meaning (issue 31): the archive's vectors on both archives, the providers
(``local`` in-process, ``openai`` over HTTP against a real endpoint serving real vectors),
fusion with BM25, and the promise that embeddings never lose a message nor fail a read."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_redis import SessionMemory
from hermes_redis.core.config import Config, Embeddings
from hermes_redis.core.embeddings import LOCAL_DEFAULT, LocalEmbedder, fuse, open_embedder, pack
from hermes_redis.core.errors import ConfigError
from hermes_redis.store.archive import ArchiveStore, Forgotten
from tests.embedding_server import EmbeddingServer
from tests.redis_server import free_port
from tests.test_archive import msgs, row

DOG = "we adopted a beagle puppy last week, she chews everything"
QUESTION = "what kind of dog do they have?"
FILLER = [f"status update {i}: the deploy pipeline for service {i} passed its checks"
          for i in range(40)]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer().start()
    yield server
    server.stop()


def semantic(config: Config, url: str, model: str = "good", **extra: Any) -> Config:
    return config.with_overrides(embeddings={"provider": "openai", "base_url": url,
                                             "model": model, "cooldown": 0, **extra})


def conversation(mem: SessionMemory) -> str:
    sid = mem.create_session("alice")
    for i, text in enumerate(FILLER):
        mem.append(sid, "user", text)
        mem.append(sid, "assistant", DOG if i == 10 else "noted, thanks for the pipeline update")
    mem.flush(sid)
    return sid


def recalled(mem: SessionMemory, sid: str) -> list[str]:
    return [m.content for m in mem.context(sid, 600, query=QUESTION).recalled]


# --- the archive's vectors: one contract over SQLite and PostgreSQL ---------------------------
def test_vectors_are_the_sessions_own_and_the_models_own(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", ["one", "two", "three"]))
    archive.write(row("s2"), msgs("s2", ["four"]))
    assert archive.unembedded("s1", "m/2", 10) == [(1, "one"), (2, "two"), (3, "three")]
    assert archive.put_vectors("s1", "m/2", [(1, b"\x00\x3c\x00\x00"), (3, b"\x00\x00\x00\x3c")]) == 2
    assert archive.put_vectors("s2", "m/2", [(1, b"\x00\x3c\x00\x3c")]) == 1
    assert archive.vectors("s1", "m/2") == [(1, b"\x00\x3c\x00\x00"), (3, b"\x00\x00\x00\x3c")]
    assert archive.vectors("s1", "m/2", after_seq=1) == [(3, b"\x00\x00\x00\x3c")]
    assert archive.vectors("s1", "other/2") == []
    assert archive.unembedded("s1", "m/2", 10) == [(2, "two")]
    assert archive.unembedded("s1", "m/2", 1) == []  # only the newest 1 looked at
    assert archive.unembedded("s1", "other/2", 10) == [(1, "one"), (2, "two"), (3, "three")]
    before = archive.vector_version("s1")
    archive.put_vectors("s1", "m/2", [(4, b"\x00\x3c\x00\x00")])  # no such message: nothing
    assert archive.vectors("s1", "m/2", after_seq=3) == []
    archive.put_vectors("s1", "m/2", [(2, b"\x00\x3c\x00\x3c")])  # below the newest: readers reload
    assert archive.vector_version("s1") > before


def test_forgetting_removes_the_vector_and_purging_all_of_them(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", ["one", "two", "three"]))
    archive.put_vectors("s1", "m/2", [(s, b"\x00\x3c\x00\x00") for s in (1, 2, 3)])
    before = archive.vector_version("s1")
    archive.forget("s1", [Forgotten("s1-0002", 2, 1)])
    assert [s for s, _ in archive.vectors("s1", "m/2")] == [1, 3]
    assert archive.vector_version("s1") > before
    assert archive.put_vectors("s1", "m/2", [(2, b"\x00\x3c\x00\x00")]) == 0  # forgotten stays so
    archive.purge("s1")
    assert archive.vectors("s1", "m/2") == []


def test_memory_vectors_go_with_their_memory(archive: ArchiveStore) -> None:
    archive.write(row("s1"), msgs("s1", ["one"]))
    mid = archive.remember("alice", "I adopted a beagle", 4, None)
    assert mid is not None
    assert archive.unembedded_memories("alice", "m/2", 10) == [(mid, "I adopted a beagle")]
    archive.put_memory_vectors("m/2", [(mid, b"\x00\x3c\x00\x00")])
    assert archive.memory_vectors("alice", "m/2") == {mid: b"\x00\x3c\x00\x00"}
    assert archive.memory_vectors("alice", "other/2") == {}
    assert archive.unembedded_memories("alice", "m/2", 10) == []
    assert archive.memory("alice") is None and archive.memory(mid) is not None
    archive.forget_memory(mid)
    assert archive.memory_vectors("alice", "m/2") == {}


# --- providers -----------------------------------------------------------------------------
def test_the_local_model_finds_a_paraphrase_in_english_and_chinese() -> None:
    embedder = open_embedder(Embeddings(provider="local"))
    assert isinstance(embedder, LocalEmbedder) and embedder.model == LOCAL_DEFAULT
    texts = [DOG, "the deploy pipeline passed its checks", "我们上周领养了一只小猎犬",
             "服务器的部署流水线通过了检查"]
    vecs = embedder.embed(texts)
    assert vecs.shape[0] == 4 and abs(float(vecs[0] @ vecs[0]) - 1) < 1e-3
    q = embedder.query(QUESTION)
    assert float(vecs[0] @ q) > float(vecs[1] @ q)
    zh = embedder.query("他们养了什么宠物？")
    assert float(vecs[2] @ zh) > float(vecs[3] @ zh)
    assert embedder.query(QUESTION) is q  # cached per text


def test_fusion_ranks_what_both_lists_rank_high_first() -> None:
    assert fuse([[1, 2, 3], [3, 4]], 10)[0] == 3
    assert fuse([[1, 2], []], 10) == [1, 2]
    assert fuse([[1, 2, 3], [4, 5, 6]], 2) == [1, 4]


@pytest.mark.parametrize("settings, line", [
    ({"provider": "openai"}, "embeddings.provider openai needs embeddings.base_url"),
    ({"provider": "local", "model": "bert"}, "is not the shipped local model"),
    ({"provider": "sentence"}, "embeddings.provider is 'sentence'; use one of none, openai, local"),
    ({"batch_size": 0}, "embeddings.batch_size must be 1-2048"),
])
def test_a_wrong_embeddings_config_is_one_line(settings: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError, match=line):
        cfg = Config().with_overrides(embeddings=settings)
        open_embedder(cfg.embeddings)


# --- end to end: the worker embeds, context() recalls by meaning ------------------------------
def test_recall_finds_by_meaning_what_words_cannot(config_factory: Any, backend: str,
                                                   endpoint: EmbeddingServer) -> None:
    with SessionMemory(config_factory(backend)) as words:
        assert not any("beagle" in text for text in recalled(words, conversation(words)))
    with SessionMemory(semantic(config_factory(backend), endpoint.url)) as mem:
        sid = conversation(mem)
        assert any("beagle" in text for text in recalled(mem, sid))
        model = mem.maintainer.read.vectors.embedder.key  # type: ignore[union-attr]
        assert len(mem.cold.vectors(sid, model)) == mem.info(sid).message_count
        mem.append(sid, "user", "one more")
        mem.flush(sid)  # archived at once; embedded with the next FILL_MIN (one call for all)
        assert len(mem.cold.vectors(sid, model)) == mem.info(sid).message_count - 1


def test_memories_are_searched_by_meaning_too(config_factory: Any, endpoint: EmbeddingServer) -> None:
    with SessionMemory(semantic(config_factory("memory"), endpoint.url)) as mem:
        mem.create_session("alice")
        dog = mem.remember("alice", "Alice adopted a beagle puppy named Biscuit")
        mem.remember("alice", "Alice deploys with GitHub Actions")
        assert [m.memory_id for m in mem.memories("alice", query="does she have a dog?")][:1] == [dog]


def test_an_unreachable_endpoint_loses_nothing_and_vectors_come_later(
        config_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    later = EmbeddingServer(port)
    config = semantic(config_factory("redis"), f"http://127.0.0.1:{port}/v1", timeout=2)
    with SessionMemory(config) as mem, caplog.at_level(logging.WARNING):
        sid = conversation(mem)
        assert mem.info(sid).message_count == 2 * len(FILLER)  # all archived
        assert mem.context(sid, 600, query=QUESTION).tokens <= 600  # by words, no error
        assert "cannot reach the endpoint" in caplog.text
        later.start()
        try:
            mem.append(sid, "user", "one more")
            mem.flush(sid)  # fills in what the failed calls left out
            model = mem.maintainer.read.vectors.embedder.key  # type: ignore[union-attr]
            assert len(mem.cold.vectors(sid, model)) == mem.info(sid).message_count
            assert any("beagle" in text for text in recalled(mem, sid))
        finally:
            later.stop()


@pytest.mark.parametrize("model, says", [
    ("short", "asked for"), ("nan", "NaN or infinity"),
    ("not-json", "not JSON"), ("error", "answered 500"),
])
def test_a_misbehaving_endpoint_is_one_line_and_changes_nothing(
        config_factory: Any, endpoint: EmbeddingServer, caplog: pytest.LogCaptureFixture,
        model: str, says: str) -> None:
    with SessionMemory(semantic(config_factory("memory"), endpoint.url, model=model)) as mem, \
            caplog.at_level(logging.WARNING):
        sid = conversation(mem)
        ctx = mem.context(sid, 600, query=QUESTION)
        assert ctx.tokens <= 600 and mem.info(sid).message_count == 2 * len(FILLER)
        assert says in caplog.text
        assert mem.cold.vector_version(sid) == 0 and not mem.cold.vectors(sid, f"openai:{model}/384")


def test_a_model_changed_under_the_archive_is_never_compared_with_the_old(
        config_factory: Any, endpoint: EmbeddingServer) -> None:
    base = config_factory("redis")
    with SessionMemory(semantic(base, endpoint.url)) as mem:
        sid = conversation(mem)
        assert len(mem.cold.vectors(sid, "openai:good/384")) == mem.info(sid).message_count
    with SessionMemory(semantic(base, endpoint.url, model="good-64")) as mem:
        assert mem.context(sid, 600, query=QUESTION).tokens <= 600  # old vectors: not read
        mem.append(sid, "user", "one more")
        mem.flush(sid)  # re-embeds the window with the new model, replacing the old vectors
        assert len(mem.cold.vectors(sid, "openai:good-64/64")) == mem.info(sid).message_count
        assert mem.cold.vectors(sid, "openai:good/384") == []


def test_forgetting_a_message_forgets_its_vector(config_factory: Any,
                                                 endpoint: EmbeddingServer) -> None:
    with SessionMemory(semantic(config_factory("memory"), endpoint.url)) as mem:
        sid = conversation(mem)
        assert any("beagle" in text for text in recalled(mem, sid))
        dog = next(m.seq for m in mem.messages(sid) if "beagle" in m.content)
        assert mem.forget_keyword(sid, "beagle") == 1
        assert not any("beagle" in text for text in recalled(mem, sid))
        seqs = [s for s, _ in mem.cold.vectors(sid, "openai:good/384")]
        assert len(seqs) == mem.info(sid).message_count and dog not in seqs


def test_the_stored_form_is_half_precision() -> None:
    import numpy as np

    vec = np.asarray([0.6, 0.8], dtype=np.float32)
    assert len(pack(vec)) == 4


def test_doctor_checks_the_provider(config_factory: Any, endpoint: EmbeddingServer) -> None:
    from hermes_redis.cli.doctor import embeddings_check

    good = embeddings_check(semantic(config_factory("memory"), endpoint.url))
    assert (good.status, good.detail.split(" in ")[0]) == ("ok", "openai:good: 384 dimensions, one text")
    down = embeddings_check(semantic(config_factory("memory"), f"http://127.0.0.1:{free_port()}/v1"))
    assert down.status == "warn" and "cannot reach the endpoint" in down.detail
    local = embeddings_check(config_factory("memory").with_overrides(
        embeddings={"provider": "local", "model": "bert"}))
    assert local.status == "fail" and "not the shipped local model" in local.detail


def test_backfill_embeds_an_archive_from_before_embeddings(redis_url: str, tmp_path: Any,
                                                           endpoint: EmbeddingServer) -> None:
    from hermes_redis.core.config import load
    from tests.http_server import cli, serve_config

    path = serve_config(tmp_path, redis_url, memory={"session": {"backend": "memory"}})
    base = load(path)  # this run's archive (SQLite, or PostgreSQL on the second stack)
    with SessionMemory(base) as mem:  # embeddings off: archived, no vectors
        sid = conversation(mem)
        count = mem.info(sid).message_count
    off = cli(path, "embeddings", "backfill", check=False)
    assert off.returncode != 0 and "embeddings.provider is none" in off.stderr
    env = {"HERMES_EMBEDDINGS_PROVIDER": "openai", "HERMES_EMBEDDINGS_URL": endpoint.url,
           "HERMES_EMBEDDINGS_MODEL": "good"}
    done = cli(path, "embeddings", "backfill", env=env)
    assert f"Embedded {count} archived message(s) in 1 session(s)" in done.stdout
    again = cli(path, "embeddings", "backfill", sid[:8], env=env)
    assert "Embedded 0 archived message(s) in 1 session(s)" in again.stdout
    with SessionMemory(base) as mem:
        assert len(mem.cold.vectors(sid, "openai:good/384")) == count

"""A property-based run of the server's own OpenAPI schema (schemathesis): for generated
requests to every operation, no 5xx, and every response matches the schema (status codes,
content types, bodies). Bounded to a few examples per operation to stay under a minute.

Not checked: that every schema-valid request is accepted. Some rules are the library's
and cannot be written in the schema (a cursor from a previous page, printable user ids,
content size in UTF-8 bytes); those answer 422/413 with the library's message.

Driven through schemathesis' Python API (``as_strategy`` + hypothesis) rather than its
pytest plugin, whose lazy-fixture loader does not run under pytest 9."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from tests.http_server import ServeProcess, serve_config
from tests.redis_server import RedisServer

# Per operation. The suite's run is derandomized (the same examples every time, so CI does not
# flake on a new find); HTTP_FUZZ_EXAMPLES=300 explores fresh random ones (it found the NUL in
# a search query that SQLite's FTS5 parser rejects).
EXAMPLES = int(os.environ.get("HTTP_FUZZ_EXAMPLES", "0")) or 50
EXPLORE = "HTTP_FUZZ_EXAMPLES" in os.environ


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[ServeProcess]:
    config: Path = serve_config(tmp_path_factory.mktemp("schema"), redis_server.url,
                                limits={"max_content_bytes": 8192})
    proc = ServeProcess(config).start()
    yield proc
    proc.stop()


def test_no_5xx_and_responses_match_the_schema(served: ServeProcess) -> None:
    schema = schemathesis.openapi.from_url(served.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 19
    failures: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not EXPLORE,
                  suppress_health_check=list(HealthCheck))
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        try:
            run()
        except Exception as err:  # every operation is tried; all failures reported together
            failures.append(f"{operation.label}: {type(err).__name__}: {str(err)[:2000]}")
    assert not failures, "\n\n".join(failures)
    assert "Traceback" not in served.output()

"""The adapters' async methods run under anyio's pytest plugin, on asyncio only."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

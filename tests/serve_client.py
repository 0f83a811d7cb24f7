"""Fixtures of the JSON API tests: the server's application behind Starlette's test client, and no request
that may reach the Hugging Face hub (import both names into a test module that needs them)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from vramwise.inputs import config as _source
from vramwise.surfaces import serve as _serve


@pytest.fixture(scope="module")
def client():
    with TestClient(_serve.create_app(), base_url="http://127.0.0.1:8000", raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    def refuse(repo, trust):  # pragma: no cover - reached only on a bug
        raise AssertionError(f"the server asked the hub for {repo!r}")

    monkeypatch.setattr(_source, "_read_hub", refuse)

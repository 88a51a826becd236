"""The control-token Secret: kept, made, rotated once per request, the previous token dropped after grace."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tide_contracts.serving_control import ErrorCode, ServingControlError
from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.manifests.control_token import accepted_tokens, control_token_secret

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def made(*tokens: str) -> Any:
    pool = iter(tokens)
    return lambda: next(pool)


def data(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def secret_for(live: dict[str, Any] | None, requested: str = "", now: datetime = NOW, grace: int = 300,
               token: str = "new") -> dict[str, Any]:
    return control_token_secret("chat", "team-a", live, requested, now, grace, new_token=made(token))


def test_a_new_secret_gets_a_token_and_remembers_a_standing_request() -> None:
    secret = secret_for(None, requested="2026-12-01")
    assert data(secret) == {"token": "new"}
    assert secret["metadata"]["annotations"] == {"tide.dev/rotated-for": "2026-12-01"}  # no rotation at birth
    assert secret_for(secret, requested="2026-12-01", token="unused") == secret  # steady: nothing changes


def test_a_new_request_rotates_once_and_keeps_the_previous_token_for_the_grace() -> None:
    first = secret_for(None, token="one")
    rotated = secret_for(first, requested="r1", token="two")
    assert data(rotated) == {"token": "two", "previous-token": "one"}
    expires = rotated["metadata"]["annotations"]["tide.dev/previous-token-expires"]
    assert datetime.fromisoformat(expires) == NOW + timedelta(seconds=300)
    assert secret_for(rotated, requested="r1", now=NOW + timedelta(seconds=299), token="x") == rotated
    after = secret_for(rotated, requested="r1", now=NOW + timedelta(seconds=300), token="x")
    assert data(after) == {"token": "two"}
    assert after["metadata"]["annotations"] == {"tide.dev/rotated-for": "r1"}
    assert data(secret_for(after, requested="r2", token="three")) == {"token": "three", "previous-token": "two"}


@pytest.mark.parametrize("live", [
    {"data": {}},
    {"data": {"token": "!!not base64!!"}},
    {"data": {"previous-token": base64.b64encode(b"orphan").decode()}},
])
def test_an_emptied_or_garbled_secret_is_made_anew_without_a_fallback(live: dict[str, Any]) -> None:
    assert data(secret_for(live, requested="r9")) == {"token": "new"}


def test_a_garbled_or_missing_deadline_drops_the_previous_token() -> None:
    live = secret_for(secret_for(None, token="one"), requested="r1", token="two")
    live["metadata"]["annotations"]["tide.dev/previous-token-expires"] = "soon"
    assert data(secret_for(live, requested="r1")) == {"token": "two"}
    assert data(secret_for(None, grace=0)) == {"token": "new"}


def test_the_operator_sends_the_current_token_first() -> None:
    assert accepted_tokens({"token": "two", "previous-token": "one"}) == ("two", "one")
    assert accepted_tokens({"token": "two"}) == ("two",)
    assert accepted_tokens({}) == ()


class FakePod:
    def __init__(self, accepts: str, calls: list[str], token: str) -> None:
        self.accepts, self.calls, self.token = accepts, calls, token

    def status(self) -> str:
        self.calls.append(self.token)
        if self.token != self.accepts:
            raise ServingControlError(401, ErrorCode.UNAUTHORIZED, "wrong token")
        return "ok"


def test_a_pod_without_the_new_token_yet_is_called_again_with_the_previous_one() -> None:
    calls: list[str] = []
    accepts = {"http://10.0.0.1:8081": "two", "http://10.0.0.2:8081": "one"}  # the second pod's kubelet lags
    fleet = Fleet([ServingPod("a", "10.0.0.1", True), ServingPod("b", "10.0.0.2", True)], 8081, "two", "one",
                  client_factory=lambda url, token, timeout_s: FakePod(accepts[url], calls, token))
    assert [fleet.client(p).status() for p in fleet.pods] == ["ok", "ok"]
    assert calls == ["two", "two", "one"]
    alone = Fleet([ServingPod("b", "10.0.0.2", True)], 8081, "three",
                  client_factory=lambda url, token, timeout_s: FakePod(accepts[url], calls, token))
    with pytest.raises(ServingControlError):  # no previous token kept: a 401 is an error
        alone.client(alone.pods[0]).status()

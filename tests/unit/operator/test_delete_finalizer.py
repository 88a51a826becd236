"""Deleting a TideDeployment deletes its captures by default (drafts only on opt-in), after its serving pods
stop; the finalizer gives up after a bounded number of failed attempts with a Warning Event."""

from __future__ import annotations

from types import SimpleNamespace

import kopf
import pytest

from tide_operator import handlers
from tide_operator.adapters.artifacts import ArtifactsUnreachable

LAST = handlers.WRITER_STOP_ATTEMPTS + handlers.CONFIG.delete_attempts - 1  # the last attempt's retry number


def body(**s3: object) -> kopf.Body:
    return kopf.Body({"apiVersion": "tide.dev/v1alpha1", "kind": "TideDeployment",
                      "metadata": {"name": "chat", "namespace": "team", "uid": "u-1"},
                      "spec": {"storage": {"s3": {"bucket": "b", **s3}}}})


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    seen: dict[str, list] = {"deleted": [], "events": [], "writers": []}

    def delete(_body, _cluster, _config, under=""):
        seen["deleted"].append(under or "everything")
        return 2

    monkeypatch.setattr(handlers, "delete_deployment_artifacts", delete)
    monkeypatch.setattr(handlers, "Cluster", lambda **_: object())
    # No cluster-wide GPU request watch: started here it would outlive the test with no API server and
    # log a failure every 5 s into whichever test runs next.
    monkeypatch.setattr(handlers, "GPU_REQUESTS", SimpleNamespace(start=lambda: None, stop=lambda: None))
    monkeypatch.setattr(handlers, "stop_capture_writers", lambda *a: bool(seen["writers"]))
    monkeypatch.setattr(handlers, "post_event", lambda _b, kind, reason, message: seen["events"].append(
        (kind, reason, message)))
    return seen


def delete(b: kopf.Body, retry: int = 0) -> None:
    handlers.delete_artifacts(body=b, spec=b.spec, retry=retry)


@pytest.mark.parametrize(("s3", "finalizer"), [
    ({}, True),  # captures are tenant data: deleted by default
    ({"deleteCapturesOnDelete": False}, False),  # nothing to delete: no finalizer, deletion never waits
    ({"deleteCapturesOnDelete": False, "deleteArtifactsOnDelete": True}, True),
])
def test_who_gets_the_finalizer(s3: dict, finalizer: bool) -> None:
    assert handlers._deletes_s3_data(body(**s3).spec) is finalizer


@pytest.mark.parametrize(("s3", "deleted"), [
    ({}, ["captures", "claims"]),  # drafts, pointer and history stay
    ({"deleteArtifactsOnDelete": True}, ["everything"]),
])
def test_what_a_deletion_deletes(recorded: dict, s3: dict, deleted: list[str]) -> None:
    delete(body(**s3))
    assert recorded["deleted"] == deleted
    assert recorded["events"][0][:2] == ("Normal", "ArtifactsDeleted")


def test_captures_wait_for_the_serving_pods_to_stop_but_not_forever(recorded: dict) -> None:
    recorded["writers"].append("a pod still running")
    with pytest.raises(kopf.TemporaryError, match="serving pods"):
        delete(body())
    assert recorded["deleted"] == []
    delete(body(), retry=handlers.WRITER_STOP_ATTEMPTS)  # waited long enough: delete anyway
    assert recorded["deleted"] == ["captures", "claims"]


def test_s3_failures_are_retried_then_given_up_with_a_warning(recorded: dict, monkeypatch) -> None:
    def unreachable(*_a, **_k):
        raise ArtifactsUnreachable("S3 artifacts under s3://b/team/chat/captures/ kept: connection refused")

    monkeypatch.setattr(handlers, "delete_deployment_artifacts", unreachable)
    with pytest.raises(kopf.TemporaryError):
        delete(body(), retry=LAST - 1)
    assert recorded["events"] == []
    with pytest.raises(kopf.PermanentError):  # the finalizer goes: the namespace never hangs
        delete(body(), retry=LAST)
    [(kind, reason, message)] = recorded["events"]
    assert (kind, reason) == ("Warning", "ArtifactsKept")
    assert "connection refused" in message
    assert f"gave up after {LAST + 1} attempts" in message

"""The handler removes the request annotations a pass consumed, and a second pass on the same version of
the object (another handler of the same Kopf event, or a timer before the removal lands) does not act on
them again; a newer version carrying a request is acted on."""

from __future__ import annotations

from types import SimpleNamespace

import kopf
import pytest

from tide_operator import handlers
from tide_operator.control.manual import PROMOTE_ANNOTATION, manual_request
from tide_operator.reconcile import PassResult


def body(resource_version: str, **annotations: str) -> kopf.Body:
    return kopf.Body({"apiVersion": "tide.dev/v1alpha1", "kind": "TideDeployment",
                      "metadata": {"name": "chat", "namespace": "team", "uid": "u-1",
                                   "resourceVersion": resource_version, "annotations": annotations},
                      "spec": {}, "status": {}})


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The request each pass saw; a pass consumes every request it sees."""
    seen: list[dict] = []

    def reconcile(plain: dict, *_: object) -> PassResult:
        request = manual_request(plain["metadata"].get("annotations"))
        seen.append({"promote": request.promote})
        return PassResult({}, (), (), request.keys)

    monkeypatch.setattr(handlers, "reconcile", reconcile)
    monkeypatch.setattr(handlers, "Cluster", lambda **_: object())
    # No cluster-wide GPU request watch: started here it would outlive the test with no API server and
    # log a failure every 5 s into whichever test runs next.
    monkeypatch.setattr(handlers, "GPU_REQUESTS", SimpleNamespace(start=lambda: None, stop=lambda: None))
    monkeypatch.setattr(handlers, "_CONSUMED", {})
    return seen


def run(b: kopf.Body) -> kopf.Patch:
    patch = kopf.Patch()
    handlers.reconcile_tide_deployment(body=b, patch=patch)
    return patch


def test_a_request_is_acted_on_once_per_version_and_its_annotation_removed(passes: list[dict]) -> None:
    first = run(body("41", **{PROMOTE_ANNOTATION: "v2"}))
    assert first["metadata"]["annotations"] == {PROMOTE_ANNOTATION: None}  # merge patch: removed
    run(body("41", **{PROMOTE_ANNOTATION: "v2"}))  # the same event's next handler: the same body
    run(body("42"))  # the removal landed
    run(body("45", **{PROMOTE_ANNOTATION: "v2"}))  # the user asks again, with the same value
    assert passes == [{"promote": "v2"}, {"promote": None}, {"promote": None}, {"promote": "v2"}]

"""Ownership of children (issue 12 item 4): only the owner UID proves a child is ours."""

from __future__ import annotations

import pytest

from tide_operator.manifests.ownership import ChildConflict, Conflict, Ownership, conflict, ownership

UID = "5f0c-our-uid"


def obj(*refs: tuple[str, str, str]) -> dict:
    return {"metadata": {"name": "chat-vllm", "ownerReferences": [
        {"kind": kind, "name": name, "uid": uid} for kind, name, uid in refs]}}


@pytest.mark.parametrize(("owner_uid", "live", "expected"), [
    (UID, None, Ownership.ABSENT),
    (UID, obj(("TideDeployment", "chat", UID)), Ownership.OURS),
    (UID, obj(("Foo", "x", "other"), ("TideDeployment", "chat", UID)), Ownership.OURS),  # one of several owners
    (UID, {"metadata": {"name": "chat-vllm"}}, Ownership.FOREIGN),  # made by hand, no owner
    (UID, obj(), Ownership.FOREIGN),
    (UID, obj(("TideDeployment", "chat", "old-uid")), Ownership.FOREIGN),  # a deleted namesake's child
    (UID, obj(("TideDeployment", "other", "x-uid")), Ownership.FOREIGN),
    (UID, obj(("Deployment", "chat-vllm", "")), Ownership.FOREIGN),
    ("", obj(("TideDeployment", "chat", "")), Ownership.FOREIGN),  # no UID proves nothing
    ("", None, Ownership.ABSENT),
])
def test_ownership(owner_uid: str, live: dict | None, expected: Ownership) -> None:
    assert ownership(owner_uid, live) is expected


def test_a_conflict_names_kind_name_and_owners() -> None:
    assert conflict(UID, "Service", None) is None
    assert conflict(UID, "Service", obj(("TideDeployment", "chat", UID))) is None
    found = conflict(UID, "Service", obj(("TideDeployment", "other", "x")))
    assert found == Conflict("Service", "chat-vllm", ("TideDeployment/other",))
    assert found.describe() == "Service chat-vllm exists owned by TideDeployment/other"
    bare = conflict(UID, "Secret", {"metadata": {"name": "chat-control"}})
    message = str(ChildConflict([bare, found]))  # type: ignore[list-item]
    assert message.startswith("Secret chat-control exists with no owner; Service chat-vllm exists owned by")
    assert "left untouched" in message

"""Pinned control routes: the draft sources and capture destinations a pod accepts (serving contract v1)."""

from __future__ import annotations

import pytest

from tide_contracts.pinning import capture_destination_refusal, draft_source_refusal, under_prefix

REGISTRY = "s3://tide/team-a/chat"
LAUNCH = ("s3://models/launch-draft", "/models/eagle3", "org/eagle3-hub")


@pytest.mark.parametrize("source", [
    f"{REGISTRY}/drafts/v3", f"{REGISTRY}/drafts/v3/", f"{REGISTRY}/candidates/r7",
    "s3://models/launch-draft/", "/models/eagle3", "org/eagle3-hub",  # the launch draft, wherever it is
])
def test_sources_under_the_registry_or_the_launch_draft_are_allowed(source: str) -> None:
    assert draft_source_refusal(source, REGISTRY, LAUNCH) is None


@pytest.mark.parametrize("source", [
    "s3://tide/team-b/chat/drafts/v3",  # another tenant's prefix in the same bucket
    "s3://tide/team-a/chatbot/drafts/v1",  # a prefix that merely starts the same
    f"{REGISTRY}/../../team-b/chat/drafts/v1", f"{REGISTRY}/drafts/./v1", f"{REGISTRY}//drafts/v1",
    REGISTRY,  # the registry root is not a draft
    "s3://models/launch-draft/other", "/models", "/etc", "org/other-hub", "http://evil/drafts/v1",
])
def test_anything_else_is_refused_naming_where_drafts_may_come_from(source: str) -> None:
    refusal = draft_source_refusal(source, REGISTRY, LAUNCH)
    assert refusal is not None
    assert f"under {REGISTRY}/" in refusal


def test_local_directories_only_under_the_configured_root() -> None:
    assert draft_source_refusal("/srv/drafts/v1", None, (), local_drafts_dir="/srv/drafts") is None
    assert draft_source_refusal("/srv/drafts/../secrets", None, (), local_drafts_dir="/srv/drafts") is not None
    assert draft_source_refusal("/srv/drafts/v1", REGISTRY, ()) is not None  # no root configured
    assert draft_source_refusal(f"{REGISTRY}/drafts/v1", None, ()) is not None  # no registry: only the launch


@pytest.mark.parametrize(("destination", "allowed"), [
    (f"{REGISTRY}/captures/", True), (f"{REGISTRY}/captures/extra", True), ("s3://cap/only/x", True),
    ("s3://tide/team-b/chat/captures/", False), (f"{REGISTRY}/../team-b/captures", False),
    ("s3://tide/team-a/chat-evil/captures", False), ("/tmp/captures", False),
])
def test_capture_destinations_stay_under_the_pods_prefixes(destination: str, allowed: bool) -> None:
    assert (capture_destination_refusal(destination, REGISTRY, "s3://cap/only") is None) is allowed
    assert capture_destination_refusal(destination, None, None) is not None


def test_prefix_matching_is_by_segment() -> None:
    assert under_prefix("s3://b/p/q", "s3://b/p")
    assert not under_prefix("s3://b/pq", "s3://b/p")
    assert not under_prefix("/b/p/q", "s3://b/p")

"""`tide pause|resume|pin|unpin|abort|promote|rollback|rotate-token`: the patch each sends and the line it prints."""

from __future__ import annotations

import pytest
from cli_fakes import tide_deployment

from tide_operator.cli import verbs
from tide_operator.control.manual import ABORT_ANNOTATION, PROMOTE_ANNOTATION, ROLLBACK_ANNOTATION
from tide_operator.manifests.control_token import ROTATE_ANNOTATION


def with_control(**control: object) -> dict:
    obj = tide_deployment()
    obj["spec"] = {"control": control}
    return obj


def test_pause_sets_the_spec_field_and_says_what_changed() -> None:
    edit = verbs.pause(with_control())
    assert edit.patch == {"spec": {"control": {"paused": True}}}
    assert edit.summary == "tidedeployment llm/chat: spec.control.paused unset -> true"
    again = verbs.pause(with_control(paused=True))
    assert again.patch is None
    assert "already true; nothing changed" in again.summary


def test_resume_clears_a_pause_and_leaves_a_running_deployment_alone() -> None:
    edit = verbs.resume(with_control(paused=True))
    assert edit.patch == {"spec": {"control": {"paused": False}}}
    assert edit.summary.endswith("spec.control.paused true -> false")
    assert verbs.resume(with_control()).patch is None
    assert verbs.resume(with_control(paused=False)).summary.endswith("not paused; nothing changed")


def test_pin_and_unpin() -> None:
    edit = verbs.pin(with_control(draftPin="v2"), "v3")
    assert edit.patch == {"spec": {"control": {"draftPin": "v3"}}}
    assert edit.summary.endswith("spec.control.draftPin v2 -> v3")
    unpin = verbs.unpin(with_control(draftPin="v3"))
    assert unpin.patch == {"spec": {"control": {"draftPin": None}}}  # a merge patch's null removes the field
    assert unpin.summary.endswith("spec.control.draftPin v3 -> unset")
    assert verbs.unpin(with_control()).patch is None


@pytest.mark.parametrize("version", ["3", "v0", "v01", "latest", "v1;rm", ""])
def test_pin_refuses_what_is_not_a_version_and_names_the_field(version: str) -> None:
    with pytest.raises(verbs.VerbRefused, match=r"spec\.control\.draftPin"):
        verbs.pin(with_control(), version)


def test_rotate_token_sets_a_new_annotation_value_once() -> None:
    edit = verbs.rotate_token(tide_deployment(), "1764680400")
    assert edit.patch == {"metadata": {"annotations": {ROTATE_ANNOTATION: "1764680400"}}}
    assert "rotation requested" in edit.summary
    obj = tide_deployment()
    obj["metadata"]["annotations"] = {ROTATE_ANNOTATION: "1764680400"}
    assert verbs.rotate_token(obj, "1764680400").patch is None


def test_completion_scripts_name_every_command() -> None:
    from tide_operator.cli.__main__ import completion_script

    script = completion_script("bash")
    for command in ("status", "get", "history", "plot", "calibrate", "pause", "resume", "pin", "unpin",
                    "abort", "promote", "rollback", "rotate-token", "completion"):
        assert command in script
    assert "--all-namespaces" in script
    assert "compdef" in completion_script("zsh")


def in_canary() -> dict:
    obj = tide_deployment()
    obj["status"]["phase"] = "Canary"
    obj["status"]["canary"] = {"candidate": "r7", "pods": ["chat-vllm-1"]}
    return obj


def test_abort_asks_the_operator_to_roll_the_running_canary_back() -> None:
    edit = verbs.abort(in_canary(), "2026-12-05T08:00:00Z")
    assert edit.patch == {"metadata": {"annotations": {ABORT_ANNOTATION: "2026-12-05T08:00:00Z"}}}
    assert edit.summary == ("tidedeployment llm/chat: abort of the canary of r7 requested "
                            f"({ABORT_ANNOTATION}=2026-12-05T08:00:00Z); the operator acts on its next pass")
    with pytest.raises(verbs.VerbRefused, match=r"no canary runs \(phase Training\); nothing to abort"):
        verbs.abort(tide_deployment(), "now")


def test_promote_and_rollback_request_a_pointer_flip() -> None:
    edit = verbs.promote(tide_deployment(), "v2")
    assert edit.patch == {"metadata": {"annotations": {PROMOTE_ANNOTATION: "v2"}}}
    assert "promotion of v2 requested (serving v3)" in edit.summary
    assert verbs.promote(tide_deployment(), "v3").summary.endswith("already serves v3; nothing changed")
    launch = verbs.promote(tide_deployment(), "initial")  # the launch draft, by its pool name
    assert launch.patch == {"metadata": {"annotations": {PROMOTE_ANNOTATION: "initial"}}}
    back = verbs.rollback(tide_deployment(), "2026-12-05T08:00:00Z")
    assert back.patch == {"metadata": {"annotations": {ROLLBACK_ANNOTATION: "2026-12-05T08:00:00Z"}}}
    assert "rollback from v3 requested" in back.summary


@pytest.mark.parametrize("verb", ["promote", "rollback"])
def test_promote_and_rollback_are_refused_while_pinned_or_during_a_canary(verb: str) -> None:
    def ask(obj: dict) -> verbs.Edit:
        return verbs.promote(obj, "v2") if verb == "promote" else verbs.rollback(obj, "now")

    pinned = tide_deployment()
    pinned["spec"] = {"control": {"draftPin": "v3"}}
    with pytest.raises(verbs.VerbRefused, match=r"spec\.control\.draftPin=v3 holds the draft; unpin it first"):
        ask(pinned)
    with pytest.raises(verbs.VerbRefused, match="a canary of r7 runs; abort it first"):
        ask(in_canary())


@pytest.mark.parametrize("version", ["3", "v0", "latest", "", "initial/..", "Initial"])
def test_promote_refuses_what_is_not_a_version_and_names_the_annotation(version: str) -> None:
    with pytest.raises(verbs.VerbRefused, match=PROMOTE_ANNOTATION):
        verbs.promote(tide_deployment(), version)

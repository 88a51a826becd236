from __future__ import annotations

from tide_operator.manifests.fingerprint import stable_hash
from tide_operator.manifests.merge import merge_override


def test_maps_merge_and_null_deletes() -> None:
    base = {"a": {"b": 1, "c": 2}, "d": 3}
    assert merge_override(base, {"a": {"c": 9, "e": 4}, "d": None}) == {"a": {"b": 1, "c": 9, "e": 4}}
    assert base == {"a": {"b": 1, "c": 2}, "d": 3}


def test_named_lists_merge_by_name_others_replace() -> None:
    base = {"containers": [{"name": "a", "image": "1", "args": ["x"]}], "tolerations": [{"key": "k"}]}
    merged = merge_override(
        base, {"containers": [{"name": "a", "args": ["y"]}, {"name": "b"}], "tolerations": [{"key": "z"}]}
    )
    assert merged == {
        "containers": [{"name": "a", "image": "1", "args": ["y"]}, {"name": "b"}],
        "tolerations": [{"key": "z"}],
    }


def test_override_objects_are_copied() -> None:
    override = {"volumes": [{"name": "v", "emptyDir": {}}]}
    merged = merge_override({}, override)
    merged["volumes"][0]["emptyDir"]["medium"] = "Memory"
    assert override == {"volumes": [{"name": "v", "emptyDir": {}}]}


def test_stable_hash_ignores_key_order_and_sees_values() -> None:
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})
    assert stable_hash({"b": [1, 2]}) != stable_hash({"b": [2, 1]})
    assert len(stable_hash({})) == 16

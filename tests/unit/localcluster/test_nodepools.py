"""Node-pool files: valid ones become labelled nodes; malformed ones name the field at fault."""

from __future__ import annotations

import pytest

from tide_localcluster.nodepools import PoolFileError, load_pools, node_body, parse_pools
from tide_localcluster.paths import DEFAULT_POOLS


def test_default_pools_describe_h100_mi250_and_cpu_nodes():
    nodes = {n.name: n for n in load_pools(DEFAULT_POOLS).nodes()}
    assert sorted(nodes) == ["cpu-0", "h100-0", "h100-1", "mi250-0"]
    assert nodes["h100-1"].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nodes["h100-1"].capacity["nvidia.com/gpu"] == "8"
    assert nodes["mi250-0"].capacity["amd.com/gpu"] == "4"
    assert "nvidia.com/gpu" not in nodes["cpu-0"].capacity
    assert nodes["cpu-0"].capacity["pods"] == "110"  # defaults fill what a pool leaves out


def test_node_body_carries_labels_and_taints():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    pools = parse_pools({"pools": [{"name": "gpu", "count": 1, "labels": {"a": "b"}, "taints": [taint]}]})
    body = node_body(pools.nodes()[0])
    assert body["metadata"]["labels"]["a"] == "b"
    assert body["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0"
    assert body["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("raw", "field"), [
    (None, "pools: must be a non-empty list"),
    ({"pools": []}, "pools: must be a non-empty list"),
    ({"pools": [{"name": "Bad_Name"}]}, "pools[0].name: must be a DNS label"),
    ({"pools": [{"name": "a", "count": 0}]}, "pools[0].count: must be an integer from 1 to 50"),
    ({"pools": [{"name": "a", "capacity": {"nvidia.com/gpu": "eight"}}]}, "pools[0].capacity.nvidia.com/gpu"),
    ({"pools": [{"name": "a", "labels": ["x"]}]}, "pools[0].labels: must be a mapping"),
    ({"pools": [{"name": "a", "taints": [{"key": "k", "effect": "Sometimes"}]}]}, "pools[0].taints[0].effect"),
    ({"pools": [{"name": "a", "gpus": 8}]}, "pools[0].gpus: unknown field"),
    ({"pools": [{"name": "a"}, {"name": "a"}]}, "pool name 'a' appears twice"),
])
def test_malformed_pool_files_name_the_field(raw, field):
    with pytest.raises(PoolFileError) as err:
        parse_pools(raw, source="pools.yaml")
    assert f"pools.yaml: {field}" in str(err.value) or field in str(err.value)


def test_unreadable_or_invalid_yaml_names_the_file(tmp_path):
    with pytest.raises(PoolFileError, match="cannot read"):
        load_pools(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [\n")
    with pytest.raises(PoolFileError, match=r"bad\.yaml: not valid YAML"):
        load_pools(bad)

"""Pod status, scrape targets and the image catalog, computed without processes or a cluster."""

from __future__ import annotations

import datetime as dt

import pytest

from tide_localcluster.images import ImageCatalogError, load_catalog
from tide_localcluster.kubelet import PodAddresses, scrape_target
from tide_localcluster.podstatus import ContainerView, PodView, terminated

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def view(*containers, policy="Always"):
    return PodView(pod_ip="127.1.0.2", started=T0, restart_policy=policy, containers=list(containers))


@pytest.mark.parametrize(("containers", "phase"), [
    ([ContainerView("a", "i")], "Pending"),
    ([ContainerView("a", "i", running_since=T0)], "Running"),
    ([ContainerView("a", "i", terminated=terminated(0, T0, T0))], "Succeeded"),
    ([ContainerView("a", "i", terminated=terminated(0, T0, T0)),
      ContainerView("b", "i", terminated=terminated(2, T0, T0))], "Failed"),
    ([ContainerView("a", "i", terminated=terminated(0, T0, T0)), ContainerView("b", "i", running_since=T0)],
     "Running"),
])
def test_phase_follows_container_states(containers, phase):
    assert view(*containers).phase() == phase


def test_ready_needs_every_container_ready():
    status = view(ContainerView("a", "i", running_since=T0, ready=True),
                  ContainerView("b", "i", running_since=T0, ready=False)).to_status(T0)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"
    assert status["containerStatuses"][0]["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    assert status["podIP"] == "127.1.0.2"


def test_scrape_target_only_for_annotated_running_pods():
    pod = {"metadata": {"name": "p", "namespace": "llm", "labels": {"tide.dev/draft-version": "v3"},
                        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}}}
    target = scrape_target(pod, "127.1.0.4", running=True)
    assert target == {"targets": ["127.1.0.4:8000"],
                      "labels": {"namespace": "llm", "pod": "p", "label_tide_dev_draft_version": "v3"}}
    assert scrape_target(pod, "127.1.0.4", running=False) is None
    pod["metadata"]["annotations"]["prometheus.io/scrape"] = "false"
    assert scrape_target(pod, "127.1.0.4", running=True) is None


def test_pod_addresses_are_unique_until_released():
    addresses = PodAddresses()
    first = addresses.allocate()
    addresses.reserve("127.1.0.3")
    seen = {first, *(addresses.allocate() for _ in range(300))}
    assert len(seen) == 301
    assert "127.1.0.3" not in seen - {first}


def test_image_catalog_maps_globs_and_rejects_unknown_fields(tmp_path):
    path = tmp_path / "images.yaml"
    path.write_text("images:\n- match: 'vllm/*'\n  pathPrepend: ['${TIDE_CACHE}/venvs/v/bin']\n"
                    "  entrypoint: [python, -m, vllm.entrypoints.openai.api_server]\n")
    catalog = load_catalog(path)
    rule = catalog.runtime_for("vllm/vllm-openai:v0.33.0")
    assert rule.entrypoint[-1] == "vllm.entrypoints.openai.api_server"
    assert rule.path_prepend[0].endswith("/venvs/v/bin")
    assert "${" not in rule.path_prepend[0]
    assert catalog.runtime_for("busybox").match == "*"
    path.write_text("images:\n- match: x\n  volumes: []\n")
    with pytest.raises(ImageCatalogError, match=r"images\[0\]\.volumes: unknown field"):
        load_catalog(path)


def test_each_plane_has_its_own_pod_network(tmp_path) -> None:
    from tide_localcluster.kubelet import PodAddresses, pod_network

    nets = {pod_network(tmp_path / f"plane{i}") for i in range(20)}
    assert len(nets) > 15  # two planes on one machine almost never share 127.N.0.0/16
    assert all(1 <= n <= 254 for n in nets)
    assert pod_network(tmp_path / "plane0") == pod_network(tmp_path / "plane0")  # stable across agent restarts
    addresses = PodAddresses(7)
    first, second = addresses.allocate(), addresses.allocate()
    assert (first, second) == ("127.7.0.3", "127.7.0.4")
    addresses.release(first)
    assert addresses.allocate() == "127.7.0.5"  # a released address is not handed out again at once

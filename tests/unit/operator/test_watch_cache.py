"""Watch caches (watch_cache.py): what the indexes keep per event, and what a pass reads from them."""

from __future__ import annotations

from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.gpu_request_watch import HeldGpus
from tide_operator.adapters.watch_cache import WatchCache, gpu_node, gpu_request, tide_object


def pod(name: str, namespace: str = "llm", node: str | None = "gpu-a", phase: str = "Running", gpus: int = 1,
        deployment: str | None = None, **labels: str) -> dict:
    tagged = {**labels, **({"tide.dev/deployment": deployment} if deployment else {})}
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "2"} if gpus else {"cpu": "2"}
    return {"metadata": {"name": name, "namespace": namespace, "labels": tagged},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def node(name: str, gpus: int = 8, ready: bool = True, unschedulable: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class Index(dict):
    """A kopf.Index as handlers see it: key -> the values of every object that produced that key."""

    def __init__(self, fn, bodies) -> None:
        super().__init__()
        for body in bodies:
            for key, value in (fn(body) or {}).items():
                self.setdefault(key, []).append(value)


def cache(pods=(), nodes=(), jobs=(), clusterwide: bool = True, deployments=()) -> WatchCache:
    ours = [p for p in pods if "tide.dev/deployment" in p["metadata"]["labels"]]
    kwargs = {"tide_pods": Index(tide_object, ours), "tide_jobs": Index(tide_object, jobs),
              "tide_deployments": Index(tide_object, deployments), "gpu_nodes": Index(gpu_node, nodes)}
    held = HeldGpus()
    held.replace(list(pods))
    found = WatchCache.from_kwargs(kwargs, held if clusterwide else None)
    assert found is not None
    return found


def test_only_pods_holding_gpus_on_a_node_are_kept() -> None:
    assert gpu_request(pod("pending", node=None)) is None  # 2000 Pending pods cost nothing
    assert gpu_request(pod("done", phase="Succeeded")) is None
    assert gpu_request(pod("cpu-only", gpus=0)) is None
    held = gpu_request(pod("vllm-0", gpus=2, deployment="chat"))
    assert held is not None
    assert held["gpu-a"].gpus == (("nvidia.com/gpu", 2),)
    assert (held["gpu-a"].namespace, held["gpu-a"].deployment) == ("llm", "chat")


def test_placement_reads_gpus_in_use_leaving_out_only_this_deployments_own_pods() -> None:
    pods = [pod("chat-vllm-0", deployment="chat", gpus=2), pod("other", gpus=3),
            pod("chat-vllm-0", namespace="team-b", deployment="chat", gpus=1),  # same name, another namespace
            pod("elsewhere", node="gpu-b", gpus=4), pod("waiting", node=None, gpus=8)]
    nodes = [node("gpu-b", ready=False), node("gpu-a")]
    cluster = Cluster(api=object(), cache=cache(pods, nodes))  # no API client call can happen
    inventory = cluster.node_inventory(exclude=("llm", "chat"))
    assert [(n.name, dict(n.requested), n.schedulable) for n in inventory] == [
        ("gpu-a", {"nvidia.com/gpu": 4}, True), ("gpu-b", {"nvidia.com/gpu": 4}, False)]
    assert inventory[0].allocatable == {"nvidia.com/gpu": 8}


def test_our_pods_and_jobs_by_namespace_and_selector() -> None:
    pods = [pod("chat-vllm-1", deployment="chat", **{"app.kubernetes.io/component": "inference"}),
            pod("chat-vllm-0", deployment="chat", **{"app.kubernetes.io/component": "inference"}),
            pod("chat-train-r1-x", deployment="chat", **{"tide.dev/training-run": "r1"}),
            pod("chat-vllm-0", namespace="team-b", deployment="chat"), pod("unrelated")]
    jobs = [{"metadata": {"name": "chat-train-r1", "namespace": "llm",
                          "labels": {"tide.dev/deployment": "chat", "tide.dev/training-run": "r1"}}}]
    cluster = Cluster(api=object(), cache=cache(pods, jobs=jobs))
    serving = cluster.pods("llm", "app.kubernetes.io/component=inference,tide.dev/deployment=chat")
    assert [p["metadata"]["name"] for p in serving] == ["chat-vllm-0", "chat-vllm-1"]  # sorted, this namespace
    assert [p["metadata"]["name"] for p in cluster.pods("llm", "tide.dev/training-run=r1")] == ["chat-train-r1-x"]
    assert [j["metadata"]["name"] for j in cluster.jobs("llm", "tide.dev/training-run=r1")] == ["chat-train-r1"]
    assert cluster.jobs("team-b", "tide.dev/training-run=r1") == []


def test_a_copy_taken_while_the_event_loop_updates_the_index_is_taken_again() -> None:
    class Racing(dict):
        calls = 0

        def get(self, key, default=None):
            Racing.calls += 1
            if Racing.calls == 1:
                raise RuntimeError("dictionary changed size during iteration")
            return super().get(key, default)

    racing = Racing(llm=[tide_object(pod("chat-vllm-0", deployment="chat"))["llm"]])
    found = WatchCache(pods=racing, jobs={}, nodes={}, requests=HeldGpus())
    assert [p["metadata"]["name"] for p in found.tide_pods("llm", "tide.dev/deployment=chat")] == ["chat-vllm-0"]
    assert Racing.calls == 2


def test_without_the_indexes_or_every_namespace_watched_the_cluster_is_listed() -> None:
    assert WatchCache.from_kwargs({"retry": 0}, HeldGpus()) is None  # a pass outside Kopf
    namespaced = cache([pod("other")], [node("gpu-a")], clusterwide=False)
    assert namespaced.node_inventory(lambda _: False) is None  # pods of unwatched namespaces are unseen


def test_until_the_gpu_watch_has_listed_once_the_pass_lists() -> None:
    class NotSynced:
        def by_node(self):
            return None

    kwargs = {"tide_pods": {}, "tide_jobs": {}, "tide_deployments": {}, "gpu_nodes": Index(gpu_node, [node("gpu-a")])}
    found = WatchCache.from_kwargs(kwargs, NotSynced())
    assert found is not None
    assert found.node_inventory(lambda _: False) is None


def test_our_deployment_comes_from_the_cache_and_a_miss_is_read() -> None:
    ours = {"metadata": {"name": "chat-vllm", "namespace": "llm", "labels": {"tide.dev/deployment": "chat"}},
            "status": {"readyReplicas": 2}}

    class Reads:
        def __init__(self) -> None:
            self.calls: list = []

        def read_namespaced_deployment(self, name, namespace):
            self.calls.append((namespace, name))
            return {"metadata": {"name": name, "namespace": namespace}}  # someone else's, unlabelled

    cluster = Cluster(api=object(), cache=cache(deployments=[ours]))
    reads = Reads()
    cluster.apps = reads
    cluster.api = type("Plain", (), {"sanitize_for_serialization": staticmethod(lambda o: o)})()
    assert cluster.deployment("llm", "chat-vllm")["status"]["readyReplicas"] == 2
    assert reads.calls == []
    # Not in the cache (not labelled ours, or not there yet): read, so a same-named foreign object is seen.
    assert cluster.deployment("llm", "other-vllm") == {"metadata": {"name": "other-vllm", "namespace": "llm"}}
    assert reads.calls == [("llm", "other-vllm")]

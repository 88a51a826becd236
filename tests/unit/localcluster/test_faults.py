"""The fault hooks of the local plane, without a plane: parsing, bookkeeping, and restarts of a
stand-in process (`sleep`) recorded the way the plane records its components."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tide_localcluster import faults
from tide_localcluster.processes import ProcessRecord, ProcessTable, is_alive, spawn


def record(name: str, pid: int = 1) -> ProcessRecord:
    return ProcessRecord(name=name, pid=pid, start_ticks=0, log="/dev/null")


def test_cmdline_splits_on_nul_and_drops_the_last_terminator():
    assert faults.parse_cmdline(b"etcd\0--data-dir\0/tmp/a b\0") == ["etcd", "--data-dir", "/tmp/a b"]
    with pytest.raises(faults.FaultError, match="empty command line"):
        faults.parse_cmdline(b"")


def test_find_record_wants_exactly_one():
    records = [record("etcd", 1), record("kube-apiserver", 2)]
    assert faults.find_record(records, "kube-apiserver").pid == 2
    with pytest.raises(faults.FaultError, match="found 0"):
        faults.find_record(records, "prometheus")
    with pytest.raises(faults.FaultError, match="found 2"):
        faults.find_record([*records, record("etcd", 3)], "etcd")


def test_lost_nodes_round_trip_and_a_bad_file_is_named(tmp_path):
    assert faults.lost_nodes(tmp_path) == frozenset()
    faults.lose_node(tmp_path, "h100-0")
    faults.lose_node(tmp_path, "cpu-0")
    assert faults.lost_nodes(tmp_path) == {"h100-0", "cpu-0"}
    faults.restore_node(tmp_path, "h100-0")
    faults.restore_node(tmp_path, "never-lost")
    assert faults.lost_nodes(tmp_path) == {"cpu-0"}
    (tmp_path / faults.LOST_NODES_FILE).write_text('{"h100-0": true}')
    with pytest.raises(faults.FaultError, match=r"lost-nodes\.json: must be a JSON list"):
        faults.lost_nodes(tmp_path)


def test_pod_process_records_match_the_pod_and_container_exactly():
    records = [record("pod-ns-chat-0-vllm", 1), record("pod-ns-chat-0-sidecar", 2),
               record("pod-ns-chat-01-vllm", 3), record("pod-other-chat-0-vllm", 4)]
    assert [r.pid for r in faults.pod_process_records(records, "ns", "chat-0")] == [1, 2]
    assert [r.pid for r in faults.pod_process_records(records, "ns", "chat-0", "vllm")] == [1]
    assert faults.pod_process_records(records, "ns", "chat-1") == []


@pytest.mark.parametrize(("node", "problems"), [
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, []),
    ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
      "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                          {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
     ["Ready=Unknown", "taint node.kubernetes.io/unreachable:NoExecute"]),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
      "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}},
     ["taint node.kubernetes.io/not-ready:NoSchedule"]),
    ({}, ["Ready=None"]),
])
def test_node_problems(node, problems):
    assert faults.node_problems(node) == problems


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1
   1: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 222 1
   2: 0100007F:A1B3 0100007F:1F90 06 00000000:00000000 00:00000000 00000000  1000        0 0 1
"""


def test_socket_inode_finds_the_established_client_end():
    assert faults.socket_inode(PROC_NET_TCP, 0xA1B2, 0x1F90) == 222
    assert faults.socket_inode(PROC_NET_TCP, 0xA1B3, 0x1F90) is None  # TIME_WAIT
    assert faults.socket_inode(PROC_NET_TCP, 0x1F90, 0) is None  # the listener


def test_fault_table_aligns_columns_and_says_no():
    lines = faults.fault_table([faults.FaultRow("etcd restarted", True, True),
                                faults.FaultRow("node lost", True, False)])
    assert lines == ["fault          | survived | nothing lost",
                     "etcd restarted | yes      | yes",
                     "node lost      | yes      | no"]


def test_restart_keeps_arguments_log_and_place_in_the_table(tmp_path):
    table = ProcessTable(tmp_path / "pids.json")
    first = spawn("first", ["sleep", "60"], tmp_path / "logs")
    target = spawn("target", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "logs")
    last = spawn("last", ["sleep", "60"], tmp_path / "logs")
    for r in (first, target, last):
        table.add(r)
    try:
        down: list[bool] = []
        took = faults.restart_component(tmp_path, "target", ready=lambda: True,
                                        while_down=lambda: down.append(is_alive(target)))
        assert down == [False]  # while_down ran with the old process gone
        assert took < 15
        names = [r.name for r in table.load()]
        assert names == ["first", "target", "last"]  # stop_all keeps the start order
        new = table.load()[1]
        assert new.pid != target.pid
        assert is_alive(new)
        assert faults.parse_cmdline(Path(f"/proc/{new.pid}/cmdline").read_bytes())[1:] == [
            "-c", "import time; time.sleep(60)"]
        assert new.log == target.log
        with pytest.raises(faults.FaultError, match="found 0"):
            faults.restart_component(tmp_path, "absent", ready=lambda: True)
    finally:
        table.stop_all()


def test_kill_pod_process_kills_only_that_pod(tmp_path):
    table = ProcessTable(tmp_path / "pod-processes.json")
    victim = spawn("pod-ns-chat-0-vllm", ["sleep", "60"], tmp_path)
    bystander = spawn("pod-ns-chat-1-vllm", ["sleep", "60"], tmp_path)
    table.add(victim)
    table.add(bystander)
    try:
        assert faults.kill_pod_process(tmp_path, "ns", "chat-0") == [victim.pid]
        _, code = os.waitpid(victim.pid, 0)  # a child of this test: reap it
        assert os.WIFSIGNALED(code)
        assert os.WTERMSIG(code) == signal.SIGKILL
        assert not is_alive(victim)
        assert is_alive(bystander)
        with pytest.raises(faults.FaultError, match="no running container process of pod ns/chat-0"):
            faults.kill_pod_process(tmp_path, "ns", "chat-0")
    finally:
        table.stop_all()


def test_heartbeat_flips_an_unknown_node_back_to_ready_and_keeps_steady_transition_times():
    from tide_localcluster.heartbeat import healthy_conditions

    current = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "lastTransitionTime": "t0"},
               {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "t1"}]
    out = {c["type"]: c for c in healthy_conditions(current, "t9")}
    assert (out["Ready"]["status"], out["Ready"]["reason"], out["Ready"]["lastTransitionTime"]) == (
        "True", "KubeletReady", "t9")
    assert out["MemoryPressure"]["lastTransitionTime"] == "t1"  # unchanged status: the old transition time
    assert out["DiskPressure"]["lastTransitionTime"] == "t9"
    assert {c["lastHeartbeatTime"] for c in out.values()} == {"t9"}

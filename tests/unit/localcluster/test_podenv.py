"""Env and command-line resolution follow the kubelet's rules (no cluster needed)."""

from __future__ import annotations

import pytest

from tide_localcluster.podenv import ContainerConfigError, command_line, container_env, expand

POD = {
    "metadata": {"name": "web-1", "namespace": "llm", "uid": "u1", "labels": {"tide.dev/deployment": "chat"},
                 "annotations": {"note": "x"}},
    "spec": {"nodeName": "h100-0", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
    "status": {"podIP": "127.1.0.7", "hostIP": "127.0.0.1"},
}
CONFIGMAPS = {("llm", "cfg"): {"mode": "fast", "level": "3"}}
SECRETS = {("llm", "s3"): {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}}


def cm(ns, name):
    return CONFIGMAPS.get((ns, name))


def secret(ns, name):
    return SECRETS.get((ns, name))


@pytest.mark.parametrize(("text", "expected"), [
    ("--host=$(POD_IP)", "--host=127.1.0.7"),
    ("$(UNDEFINED)", "$(UNDEFINED)"),
    ("$$(POD_IP)", "$(POD_IP)"),
    ("a$$b", "a$b"),
    ("$(POD_IP):$(PORT)", "127.1.0.7:8000"),
    ("no refs", "no refs"),
])
def test_expand_follows_kubernetes_rules(text, expected):
    assert expand(text, {"POD_IP": "127.1.0.7", "PORT": "8000"}) == expected


def test_env_resolves_every_source_in_order():
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}, {"secretRef": {"name": "s3"}}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tide.dev/deployment']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
            {"name": "GPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}},
            {"name": "URL", "value": "http://$(IP):8000/$(MODE)"},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "absent", "optional": True}}},
        ],
    }
    env = container_env(POD, container, cm, secret)
    assert env == {"CFG_mode": "fast", "CFG_level": "3", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
                   "IP": "127.1.0.7", "TD": "chat", "NODE": "h100-0", "MODE": "fast", "GPUS": "4",
                   "URL": "http://127.1.0.7:8000/fast"}


@pytest.mark.parametrize(("var", "message"), [
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}, "ConfigMap llm/nope not found"),
    ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "nokey"}}}, "key 'nokey' in Secret s3"),
    ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}, "unsupported fieldRef"),
])
def test_missing_references_fail_like_create_container_config_error(var, message):
    with pytest.raises(ContainerConfigError, match=message):
        container_env(POD, {"name": "c", "env": [var]}, cm, secret)


def test_command_replaces_entrypoint_and_args_are_expanded():
    container = {"name": "c", "args": ["--host", "$(POD_IP)"]}
    assert command_line(container, ["python", "-m", "srv"], {"POD_IP": "127.1.0.9"}) == [
        "python", "-m", "srv", "--host", "127.1.0.9"]
    assert command_line({**container, "command": ["run"]}, ["ignored"], {"POD_IP": "ip"}) == ["run", "--host", "ip"]


def test_no_command_and_no_entrypoint_is_a_clear_error():
    with pytest.raises(ContainerConfigError, match="no command and image 'vllm/x'"):
        command_line({"name": "c", "image": "vllm/x"}, [], {})

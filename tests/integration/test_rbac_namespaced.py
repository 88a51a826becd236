"""Least-privilege RBAC on the real control plane (issue 12, item 6).

The operator runs as a user of its own that only the RBAC the chart renders with
``watchNamespaces: [a, b]`` binds (``tide_operator.rbac.namespaced_rbac``): Roles in a and b and a
ClusterRole for the cluster-wide reads. A TideDeployment in a is served; one in c is left alone.
The apiserver's audit log records every request of that user, reads included: none may be refused,
and the verbs it used must be exactly the ones granted, apart from those that
``UNSEEN_IN_A_SERVING_RUN`` lists with the reason this run cannot show them.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from tests.integration.kubewait import wait_for
from tests.integration.test_operator import SPEC, condition, create_secret, get_td, ready_td, tide
from tide_e2e.operator_install import OperatorProcess, grant_namespaced_operator_rbac, install_crd
from tide_localcluster.audit import AuditLog
from tide_localcluster.plane import NAMESPACED_OPERATOR_USER
from tide_operator import rbac
from tide_operator.api import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

RBAC_NAME = "tide-operator-namespaced"


@pytest.fixture(scope="module")
def namespaces(kube):
    core = client.CoreV1Api(kube)
    suffix = uuid.uuid4().hex[:5]
    names = {key: f"rbac-{key}-{suffix}" for key in "abc"}
    for name in names.values():
        core.create_namespace({"metadata": {"name": name}})
    for name in names.values():  # pods are refused until the default account has its token (v1.20)
        wait_for(lambda n=name: any(sa.secrets for sa in core.list_namespaced_service_account(n).items),
                 f"default service account token in {name}")
    yield names
    for name in names.values():
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def operator(plane, kube, namespaces):
    install_crd(kube)
    watched = [namespaces["a"], namespaces["b"]]
    grant_namespaced_operator_rbac(kube, watched, NAMESPACED_OPERATOR_USER, RBAC_NAME)
    audit = AuditLog(plane.audit_log)
    process = OperatorProcess(plane, kubeconfig=plane.namespaced_operator_kubeconfig, namespaces=tuple(watched))
    process.audit_mark = audit.mark()  # from before the operator's first request
    process.start()
    yield process
    process.stop()
    rbac_api = client.RbacAuthorizationV1Api(kube)
    rbac_api.delete_cluster_role_binding(RBAC_NAME)
    rbac_api.delete_cluster_role(RBAC_NAME)


def test_watched_namespace_is_served_other_ignored_and_nothing_refused(kube, plane, namespaces, operator):
    started = time.monotonic()
    a, c = namespaces["a"], namespaces["c"]
    objects, core, apps = client.CustomObjectsApi(kube), client.CoreV1Api(kube), client.AppsV1Api(kube)
    for namespace in (a, c):
        create_secret(kube, namespace)
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, tide("chat", SPEC))

    td = wait_for(lambda: ready_td(kube, a, "chat"), "TideDeployment in a watched namespace Ready", timeout_s=90)
    assert td["status"]["phase"] == "Serving"
    assert condition(td, "Scheduled")["status"] == "True"
    assert apps.read_namespaced_deployment("chat-vllm", a).metadata.owner_references[0].kind == "TideDeployment"
    time.sleep(6)  # three resync passes in a; c would have had them too

    ignored = get_td(kube, c, "chat")
    assert "status" not in ignored, ignored.get("status")
    assert not any(k.startswith(GROUP) for k in ignored["metadata"].get("annotations") or {})
    assert not apps.list_namespaced_deployment(c).items
    assert not core.list_namespaced_service(c).items
    assert not core.list_namespaced_config_map(c, label_selector="tide.dev/deployment=chat").items
    assert [s.metadata.name for s in core.list_namespaced_secret(c).items
            if s.type != "kubernetes.io/service-account-token"] == ["s3-creds"]

    # An open watch is audited only once it closes: stop the operator so that its watches do.
    operator.stop()
    time.sleep(1)
    calls = AuditLog(plane.audit_log).calls(NAMESPACED_OPERATOR_USER, since=operator.audit_mark)
    assert calls, "the audit log recorded no request of the namespaced operator"
    refused = [str(call) for call in calls if call.code == 403]
    assert refused == [], refused
    assert not [str(call) for call in calls if call.namespace == c]

    used = {call.permission for call in calls}
    granted = rbac.permissions(rbac.namespaced_rules() + rbac.cluster_rules())
    assert used <= granted, f"used but not granted: {sorted(used - granted)}"
    unexplained = granted - used - set(rbac.UNSEEN_IN_A_SERVING_RUN)
    assert not unexplained, f"granted, never called, and not in UNSEEN_IN_A_SERVING_RUN: {sorted(unexplained)}"
    print(f"namespaced operator: {len(calls)} requests, 0 refused, verbs used: "
          + ", ".join(f"{v} {g or 'core'}/{r}" for g, r, v in sorted(used))
          + f" ({time.monotonic() - started:.1f}s)")

"""The Kubernetes Pod Security Standards as a table of rules, to check rendered pods statically.

Source: https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the Baseline and
Restricted policies, one row per control of that page). A maintained checker was looked for first:
checkov (PyPI) checks its own CKV_K8S_* policy rather than these profiles and pins boto3 and
packaging below what this project uses; the reference implementation, k8s.io/pod-security-admission,
is Go. So the published rules are written out here, each with the page's control name.

``violations(pod)`` takes a Pod, or any object with a pod template (Deployment, Job), and returns
``"<level>/<control>: <field>"`` strings; empty means the pod satisfies the Restricted profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_TYPES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Pod:
    """The parts of a pod the rules read."""

    metadata: dict[str, Any]
    spec: dict[str, Any]

    @property
    def security(self) -> dict[str, Any]:
        return self.spec.get("securityContext") or {}

    def containers(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(field path, container) for every container of every kind."""
        for kind in CONTAINER_KINDS:
            for index, container in enumerate(self.spec.get(kind) or ()):
                yield f"spec.{kind}[{index}]", container

    def container_security(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for path, container in self.containers():
            yield f"{path}.securityContext", container.get("securityContext") or {}

    def security_contexts(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The pod's securityContext, then each container's."""
        yield "spec.securityContext", self.security
        yield from self.container_security()


Check = Callable[[Pod], list[str]]


def _host_process(pod: Pod) -> list[str]:
    return [f"{path}.windowsOptions.hostProcess" for path, ctx in pod.security_contexts()
            if (ctx.get("windowsOptions") or {}).get("hostProcess")]


def _host_namespaces(pod: Pod) -> list[str]:
    return [f"spec.{field}" for field in ("hostNetwork", "hostPID", "hostIPC") if pod.spec.get(field)]


def _privileged(pod: Pod) -> list[str]:
    return [f"{path}.privileged" for path, ctx in pod.container_security() if ctx.get("privileged")]


def _added_capabilities(allowed: frozenset[str]) -> Check:
    def check(pod: Pod) -> list[str]:
        return [f"{path}.capabilities.add: {cap}" for path, ctx in pod.container_security()
                for cap in (ctx.get("capabilities") or {}).get("add") or () if cap not in allowed]
    return check


def _host_path(pod: Pod) -> list[str]:
    return [f"spec.volumes[{i}].hostPath" for i, v in enumerate(pod.spec.get("volumes") or ()) if "hostPath" in v]


def _host_ports(pod: Pod) -> list[str]:
    return [f"{path}.ports[{i}].hostPort" for path, c in pod.containers()
            for i, port in enumerate(c.get("ports") or ()) if port.get("hostPort")]


def _apparmor(pod: Pod) -> list[str]:
    found = [f"{path}.appArmorProfile" for path, ctx in pod.security_contexts()
             if (ctx.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost")]
    annotations = pod.metadata.get("annotations") or {}
    return found + [f"metadata.annotations[{key}]" for key, value in annotations.items()
                    if key.startswith(APPARMOR_ANNOTATION) and value != "runtime/default"
                    and not str(value).startswith("localhost/")]


def _selinux(pod: Pod) -> list[str]:
    found = []
    for path, ctx in pod.security_contexts():
        options = ctx.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            found.append(f"{path}.seLinuxOptions")
    return found


def _proc_mount(pod: Pod) -> list[str]:
    return [f"{path}.procMount" for path, ctx in pod.container_security()
            if ctx.get("procMount") not in (None, "Default")]


def _seccomp_not_unconfined(pod: Pod) -> list[str]:
    return [f"{path}.seccompProfile" for path, ctx in pod.security_contexts()
            if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined"]


def _sysctls(pod: Pod) -> list[str]:
    return [f"spec.securityContext.sysctls: {s.get('name')}" for s in pod.security.get("sysctls") or ()
            if s.get("name") not in SAFE_SYSCTLS]


def _volume_types(pod: Pod) -> list[str]:
    return [f"spec.volumes[{i}].{kind}" for i, volume in enumerate(pod.spec.get("volumes") or ())
            for kind in volume if kind != "name" and kind not in RESTRICTED_VOLUME_TYPES]


def _privilege_escalation(pod: Pod) -> list[str]:
    return [f"{path}.allowPrivilegeEscalation" for path, ctx in pod.container_security()
            if ctx.get("allowPrivilegeEscalation") is not False]


def _non_root(pod: Pod) -> list[str]:
    pod_level = pod.security.get("runAsNonRoot")
    found = ["spec.securityContext.runAsNonRoot"] if pod_level is False else []
    return found + [f"{path}.runAsNonRoot" for path, ctx in pod.container_security()
                    if ctx.get("runAsNonRoot") is False or (ctx.get("runAsNonRoot") is None and pod_level is not True)]


def _non_root_user(pod: Pod) -> list[str]:
    return [f"{path}.runAsUser" for path, ctx in pod.security_contexts() if ctx.get("runAsUser") == 0]


def _non_root_groups(pod: Pod) -> list[str]:
    found = [f"{path}.runAsGroup" for path, ctx in pod.security_contexts() if ctx.get("runAsGroup") == 0]
    security = pod.security
    found += ["spec.securityContext.fsGroup"] if security.get("fsGroup") == 0 else []
    return found + ["spec.securityContext.supplementalGroups"] * (0 in (security.get("supplementalGroups") or ()))


def _seccomp_required(pod: Pod) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    if (pod.security.get("seccompProfile") or {}).get("type") in allowed:
        return []  # containers inherit it (Unconfined ones are caught by the baseline rule)
    return [f"{path}.seccompProfile" for path, ctx in pod.container_security()
            if (ctx.get("seccompProfile") or {}).get("type") not in allowed]


def _drop_all(pod: Pod) -> list[str]:
    return [f"{path}.capabilities.drop" for path, ctx in pod.container_security()
            if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or ())]


@dataclass(frozen=True)
class Rule:
    level: str  # baseline | restricted
    control: str  # the control's name on the Pod Security Standards page
    check: Check


RULES: tuple[Rule, ...] = (
    Rule("baseline", "HostProcess", _host_process),
    Rule("baseline", "Host Namespaces", _host_namespaces),
    Rule("baseline", "Privileged Containers", _privileged),
    Rule("baseline", "Capabilities", _added_capabilities(BASELINE_CAPABILITIES)),
    Rule("baseline", "HostPath Volumes", _host_path),
    Rule("baseline", "Host Ports", _host_ports),
    Rule("baseline", "AppArmor", _apparmor),
    Rule("baseline", "SELinux", _selinux),
    Rule("baseline", "/proc Mount Type", _proc_mount),
    Rule("baseline", "Seccomp", _seccomp_not_unconfined),
    Rule("baseline", "Sysctls", _sysctls),
    Rule("restricted", "Volume Types", _volume_types),
    Rule("restricted", "Privilege Escalation", _privilege_escalation),
    Rule("restricted", "Running as Non-root", _non_root),
    Rule("restricted", "Running as Non-root user", _non_root_user),
    # Listed as optional on earlier versions of the page; kept because the operator's pods pass it.
    Rule("restricted", "Non-root groups", _non_root_groups),
    Rule("restricted", "Seccomp", _seccomp_required),
    Rule("restricted", "Capabilities", _drop_all),
    Rule("restricted", "Capabilities (add)", _added_capabilities(frozenset({"NET_BIND_SERVICE"}))),
)


def pod_of(manifest: dict[str, Any]) -> Pod:
    """The pod a Pod, Deployment or Job describes."""
    if manifest.get("kind") == "Pod":
        return Pod(manifest.get("metadata") or {}, manifest["spec"])
    template = manifest["spec"]["template"]
    return Pod(template.get("metadata") or {}, template["spec"])


def violations(manifest: dict[str, Any]) -> list[str]:
    """Every Restricted-profile violation of the manifest's pod (baseline rules included)."""
    pod = pod_of(manifest)
    return [f"{rule.level}/{rule.control}: {field}" for rule in RULES for field in rule.check(pod)]

"""One pod's lifecycle on the process kubelet: start, watch, probe, restart, report, stop."""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tide_localcluster import probes, volumes
from tide_localcluster.podenv import ContainerConfigError, command_line, container_env, decode_secret
from tide_localcluster.podstatus import ContainerView, PodView, readiness_gates, rfc3339, terminated
from tide_localcluster.processes import ProcessRecord, _start_ticks, stop

if TYPE_CHECKING:
    from tide_localcluster.kubelet import Kubelet

log = logging.getLogger("kubelet")
PASS_THROUGH_ENV = ("HOME", "LANG", "LC_ALL", "TZ", "TIDE_CACHE", "HF_HUB_OFFLINE",
                    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
MAX_BACKOFF_S = 10.0  # the real kubelet caps at 5 min; tests need restarts to be quick
VOLUME_SYNC_S = 2.0  # the real kubelet's sync period is a minute; tests need updates to be quick
TICK_S = 0.25
# The status is sent again this often even unchanged, as the kubelet's status manager does: the
# node lifecycle controller may have marked the pod not Ready meanwhile (a node late on heartbeats).
STATUS_RESYNC_S = 10.0
# Merged by condition type, so the conditions others own (a readiness gate's) stay. The client picks it
# for a dict body today; pinned, because a merge patch would replace the whole conditions list.
STATUS_PATCH = "application/strategic-merge-patch+json"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Container:
    spec: dict[str, Any]
    view: ContainerView
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    record: ProcessRecord | None = None
    started_mono: float = 0.0
    backoff_until: float = 0.0
    startup: probes.ProbeState = field(default_factory=probes.ProbeState)
    readiness: probes.ProbeState = field(default_factory=probes.ProbeState)
    liveness: probes.ProbeState = field(default_factory=probes.ProbeState)


class PodRunner(threading.Thread):
    def __init__(self, pod: dict[str, Any], ip: str, kubelet: Kubelet) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}-{meta['name']}", daemon=True)
        self.pod, self.ip, self.kubelet = pod, ip, kubelet
        self.pod.setdefault("status", {}).update(podIP=ip, hostIP="127.0.0.1", podIPs=[{"ip": ip}])
        self.dir = kubelet.pod_dir(meta["namespace"], meta["name"])
        # Containers each have a private /tmp. Short, because programs put Unix sockets there (108-byte limit).
        self.tmp = Path(tempfile.gettempdir()) / f"tide-pod-{meta['uid'][:13]}"
        self.view = PodView(pod_ip=ip, started=utcnow(), restart_policy=pod["spec"].get("restartPolicy", "Always"),
                            readiness_gates=readiness_gates(pod["spec"]),
                            api_conditions={c["type"]: c["status"] for c in pod["status"].get("conditions") or []})
        self.containers = [Container(c, ContainerView(c["name"], c.get("image", "")))
                           for c in pod["spec"]["containers"]]
        self.view.containers = [c.view for c in self.containers]
        self._stop_requested = threading.Event()
        self.stopping = False
        self._grace_s = 30.0
        self._delete_after = False
        self._reported: dict[str, Any] | None = None
        self._reported_at = 0.0
        self._transitions: dict[str, tuple[str, str]] = {}
        self.volume_dirs: dict[str, Path] = {}  # secret/configMap volumes: name -> their files here
        self._volumes_synced = 0.0

    # --- control from the kubelet ---
    def stop(self, grace_s: float, then_delete: bool = False) -> None:
        self.stopping = True
        log.info("%s: stopping (grace %.0fs)", self.name, grace_s)
        self._grace_s, self._delete_after = grace_s, then_delete
        self._stop_requested.set()

    def observe(self, api_conditions: dict[str, str]) -> None:
        """The pod's conditions as the API has them now (type -> status): whoever owns a readiness gate
        may have flipped it, and the next tick reports Ready again from them."""
        self.view.api_conditions = api_conditions

    def is_running(self) -> bool:
        return any(c.view.running_since for c in self.containers)

    # --- the thread ---
    def run(self) -> None:
        meta = self.pod["metadata"]
        try:
            if self._prepare() and self._run_init_containers():
                self.view.initialized = True
                self._supervise()
        except (ApiException, OSError) as e:
            log.warning("pod %s/%s: %s", meta["namespace"], meta["name"], e)
        except Exception:
            log.exception("pod %s/%s: runner crashed", meta["namespace"], meta["name"])
            raise
        finally:
            # As the kubelet does on a delete: each running container's preStop hook, then SIGTERM, all
            # within the pod's grace period (containers one after another here: our pods have one).
            deadline = time.monotonic() + (self._grace_s if self.stopping else 0.0)
            for c in self.containers:
                if self.stopping:
                    self._pre_stop(c, deadline)
                self._kill(c, max(0.0, deadline - time.monotonic()))
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self._delete_after:
                self.kubelet.finalize_delete(meta["namespace"], meta["name"], meta["uid"])
            self.kubelet.forget(meta["uid"], self.ip)

    def _prepare(self) -> bool:
        """Resolve env; a missing ConfigMap/Secret key waits, like CreateContainerConfigError."""
        while not self._stop_requested.is_set():
            try:
                self._sync_volumes()
                for c in self.containers:
                    c.env = self._environment(c.spec)
                return True
            except ContainerConfigError as e:
                for c in self.containers:
                    c.view.waiting = ("CreateContainerConfigError", str(e))
                self._report()
            except (HTTPError, OSError) as e:  # the apiserver is away: read the objects again shortly
                log.info("%s: env not resolved yet (%s)", self.name, type(e).__name__)
                self._stop_requested.wait(2.0)
        return False

    def _configmap(self, ns: str, name: str) -> dict[str, str] | None:
        try:
            return self.kubelet.core.read_namespaced_config_map(name, ns).data or {}
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _secret(self, ns: str, name: str) -> dict[str, str] | None:
        try:
            return decode_secret(self.kubelet.core.read_namespaced_secret(name, ns).data)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _environment(self, spec: dict[str, Any]) -> dict[str, str]:
        env = container_env(self.pod, spec, self._configmap, self._secret)
        mounted = volumes.mounts(spec, self.volume_dirs)
        return {k: volumes.rewrite(v, mounted) for k, v in env.items()}

    def _sync_volumes(self) -> None:
        """Write every secret/configMap volume's files (again: a changed object changes them in place)."""
        namespace = self.pod["metadata"]["namespace"]
        for volume in self.pod["spec"].get("volumes", []):
            lookup = self._secret if "secret" in volume else self._configmap
            files = volumes.projected_files(volume, lookup, namespace)
            if files is None:
                continue
            where = self.dir / "volumes" / volume["name"]
            if volumes.write_atomically(where, files, volumes.file_mode(volume)) and volume["name"] in self.volume_dirs:
                log.info("%s: volume %s updated", self.name, volume["name"])
            self.volume_dirs[volume["name"]] = where
        self._volumes_synced = time.monotonic()

    def _resync_volumes(self, now: float) -> None:
        if now - self._volumes_synced < VOLUME_SYNC_S:
            return
        try:
            self._sync_volumes()
        except (ContainerConfigError, ApiException, HTTPError) as e:  # like the kubelet: the files stay as they were
            log.info("%s: volumes not refreshed: %s", self.name, e)
            self._volumes_synced = now

    def _run_init_containers(self) -> bool:
        for spec in self.pod["spec"].get("initContainers", []):
            c = Container(spec, ContainerView(spec["name"], spec.get("image", "")), env=self._environment(spec))
            self._launch(c)
            while c.process is not None and c.process.poll() is None:
                if self._stop_requested.wait(TICK_S):
                    return False
            if c.process is None or c.process.returncode != 0:
                self.view.init_failed = self.view.restart_policy == "Never"
                for other in self.containers:
                    other.view.waiting = ("Init:Error", f"init container {spec['name']} failed")
                self._report()
                return False
        return True

    def _supervise(self) -> None:
        for c in self.containers:
            self._launch(c)
        while not self._stop_requested.is_set():
            now = time.monotonic()
            for c in self.containers:
                self._check_exit(c, now)
                self._probe(c, now)
            self._resync_volumes(now)
            self._report()
            if self.view.phase() in ("Succeeded", "Failed"):
                return
            self._stop_requested.wait(TICK_S)

    def _process_env(self, c: Container) -> dict[str, str]:
        runtime = self.kubelet.images.runtime_for(c.spec.get("image", ""))
        env = {k: os.environ[k] for k in PASS_THROUGH_ENV if k in os.environ}
        env["PATH"] = os.pathsep.join([*runtime.path_prepend, os.environ.get("PATH", "/usr/bin:/bin")])
        self.tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(self.tmp)
        env.update(runtime.env)
        env.update(c.env)
        return env

    def _pre_stop(self, c: Container, deadline: float) -> None:
        """A running container's lifecycle.preStop: ``sleep.seconds``, or ``exec.command`` run in its
        environment (a failing hook is logged, as the kubelet records FailedPreStopHook, and the stop goes on)."""
        hook = (c.spec.get("lifecycle") or {}).get("preStop") or {}
        if c.record is None or not hook:
            return
        left = max(0.0, deadline - time.monotonic())
        if "sleep" in hook:
            time.sleep(min(float(hook["sleep"].get("seconds", 0)), left))
            return
        command = (hook.get("exec") or {}).get("command")
        if not command:
            return
        try:
            subprocess.run(command, env=self._process_env(c), cwd=str(self.dir), timeout=left, check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            log.info("%s: preStop hook of %s failed: %s", self.name, c.spec["name"], e)

    def _launch(self, c: Container) -> None:
        runtime = self.kubelet.images.runtime_for(c.spec.get("image", ""))
        env = self._process_env(c)
        try:
            mounted = volumes.mounts(c.spec, self.volume_dirs)
            argv = [volumes.rewrite(a, mounted) for a in command_line(c.spec, list(runtime.entrypoint), env)]
        except ContainerConfigError as e:
            c.view.waiting = ("CreateContainerError", str(e))
            return
        log_path = self.dir / f"{c.spec['name']}.log"
        cwd = c.spec.get("workingDir")
        cwd = cwd if cwd and os.path.isdir(cwd) else str(self.dir)
        with open(log_path, "ab") as out:
            try:
                c.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, cwd=cwd, start_new_session=True)
            except OSError as e:  # e.g. the executable does not exist: like a failed container start
                c.view.waiting = ("RunContainerError", f"{argv[0]}: {e.strerror}")
                c.backoff_until = time.monotonic() + self._backoff(c)
                return
        ticks = _start_ticks(c.process.pid) or 0
        c.record = ProcessRecord(name=f"{self.name}-{c.spec['name']}", pid=c.process.pid, start_ticks=ticks,
                                 log=str(log_path))
        self.kubelet.record_process(c.record)
        c.started_mono = time.monotonic()
        c.view.pid, c.view.running_since, c.view.waiting, c.view.terminated = c.process.pid, utcnow(), None, None
        c.startup, c.readiness, c.liveness = probes.ProbeState(), probes.ProbeState(), probes.ProbeState()

    def _backoff(self, c: Container) -> float:
        return min(MAX_BACKOFF_S, 2.0 ** c.view.restart_count)

    def _check_exit(self, c: Container, now: float) -> None:
        if c.process is None:
            if c.view.terminated is None and now >= c.backoff_until and c.view.waiting is not None \
                    and c.view.waiting[0] in ("CrashLoopBackOff", "RunContainerError"):
                c.view.restart_count += 1
                self._launch(c)
            return
        code = c.process.poll()
        if code is None:
            return
        self._release(c)
        c.process = None
        state = terminated(code, c.view.running_since, utcnow())
        c.view.running_since, c.view.ready, c.view.pid = None, False, None
        policy = self.view.restart_policy
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            c.view.last_terminated = state
            c.view.waiting = ("CrashLoopBackOff", f"back-off restarting failed container (exit {code})")
            c.backoff_until = now + self._backoff(c)
        else:
            c.view.terminated = state

    def _probe(self, c: Container, now: float) -> None:
        if c.process is None or c.view.running_since is None:
            return
        spec = c.spec
        if "startupProbe" in spec and not c.startup.passing:
            # As in Kubernetes: readiness and liveness wait until the startup probe passes once, and a
            # startup probe that fails failureThreshold times in a row restarts the container.
            c.startup = probes.step(spec["startupProbe"], c.startup, now, c.started_mono, self.ip, spec, c.env)
            c.view.ready = False
            if c.startup.failures >= int(spec["startupProbe"].get("failureThreshold", 3)):
                log.info("%s: startup probe failed, restarting %s", self.name, spec["name"])
                self._kill(c, float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
            if not c.startup.passing:
                return
        if "readinessProbe" in spec:
            c.readiness = probes.step(spec["readinessProbe"], c.readiness, now, c.started_mono, self.ip, spec, c.env)
            c.view.ready = c.readiness.passing
        else:
            c.view.ready = True
        if "livenessProbe" in spec:
            c.liveness = probes.step(spec["livenessProbe"], c.liveness, now, c.started_mono, self.ip, spec, c.env)
            if c.liveness.failures >= int(spec["livenessProbe"].get("failureThreshold", 3)):
                log.info("%s: liveness probe failed, restarting %s", self.name, spec["name"])
                self._kill(c, float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))

    def _kill(self, c: Container, grace_s: float) -> None:
        if c.record is not None:
            stop(c.record, grace_seconds=grace_s, leader_only=True)
            if c.process is not None:
                c.process.poll()
            self._release(c)

    def _release(self, c: Container) -> None:
        if c.record is not None:
            self.kubelet.drop_process(c.record.pid)
            c.record = None

    def _report(self) -> None:
        if self.stopping:
            return
        status = self.view.to_status(utcnow())
        for cond in status["conditions"]:  # lastTransitionTime moves only when the status flips
            previous = self._transitions.get(cond["type"])
            if previous and previous[0] == cond["status"]:
                cond["lastTransitionTime"] = previous[1]
            self._transitions[cond["type"]] = (cond["status"], cond["lastTransitionTime"])
        if status == self._reported and time.monotonic() - self._reported_at < STATUS_RESYNC_S:
            return
        meta = self.pod["metadata"]
        try:
            self.kubelet.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status},
                                                          _content_type=STATUS_PATCH)
            self._reported, self._reported_at = status, time.monotonic()
        except ApiException as e:
            if e.status != 404 and not server_side(e):
                raise
            if e.status != 404:
                log.info("%s: status not sent (apiserver %s), again next tick", self.name, e.status)
        except (HTTPError, OSError) as e:  # the apiserver is away (restarting): the containers run on
            log.info("%s: status not sent (%s), again next tick", self.name, type(e).__name__)


def server_side(e: ApiException) -> bool:
    """An apiserver answer that says "later" (etcd away, overloaded), not "never"."""
    return e.status is not None and (e.status >= 500 or e.status == 429)


__all__ = ["PodRunner", "rfc3339"]

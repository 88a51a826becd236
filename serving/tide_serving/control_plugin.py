"""The `vllm.endpoint_plugins` entry `tide_control`: the narrow, authenticated /tide/v1 routes.

Loaded by the API server only when named in `VLLM_PLUGINS` (e.g. `VLLM_PLUGINS=tide_control`).
The routes are served on their own port (TIDE_CONTROL_PORT, default 8081), never on the OpenAI
API port, so a NetworkPolicy can admit only the operator to them. Every route requires a bearer
token from the mounted Secret file (TIDE_CONTROL_TOKEN_FILE, re-read when the kubelet updates it);
with no token configured the routes answer 503 not_configured. No vLLM development-mode route is
needed or opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from argparse import Namespace
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from tide_contracts import serving_control as sc
from tide_serving import serving_metrics
from tide_serving.control_state import SWITCH_SCHEDULERS, ControlFailure, ControlState
from tide_serving.settings import load_settings

log = logging.getLogger(__name__)
router = APIRouter()
_Req = TypeVar("_Req", bound=BaseModel)


def _error(code: sc.ErrorCode, message: str) -> JSONResponse:
    status, body = sc.error_payload(code, message)
    return JSONResponse(body, status_code=status)


def _control(request: Request) -> ControlState | None:
    return getattr(request.app.state, "tide_control", None)


def _denied(request: Request, control: ControlState | None) -> JSONResponse | None:
    accepted = control.settings.control_tokens.accepted() if control is not None else ()
    if not accepted:
        return _error(sc.ErrorCode.NOT_CONFIGURED, f"control routes are disabled: no token in "
                      f"{sc.CONTROL_TOKEN_FILE_ENV} or {sc.CONTROL_TOKEN_ENV}, or the plugin did not initialise")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # Compare with every accepted token (current, and previous during a rotation), not the first match.
    matches = [hmac.compare_digest(token.encode(), t.encode()) for t in accepted]
    if scheme.lower() != "bearer" or not any(matches):
        return _error(sc.ErrorCode.UNAUTHORIZED, "missing or wrong bearer token")
    return None


async def _body(request: Request, model: type[_Req]) -> _Req:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as err:
        raise ControlFailure(sc.ErrorCode.INVALID_REQUEST, f"{model.__name__}: {err}") from err


async def _handle(request: Request, op: Callable[[ControlState], Awaitable[BaseModel]]) -> JSONResponse:
    control = _control(request)
    if (denied := _denied(request, control)) is not None:
        return denied
    assert control is not None
    try:
        result = await op(control)
    except ControlFailure as failure:
        return _error(failure.code, failure.message)
    return JSONResponse(result.model_dump(mode="json"))


@router.get(sc.STATUS_ROUTE)
async def get_status(request: Request) -> JSONResponse:
    return await _handle(request, lambda c: c.status())


@router.post(sc.DRAFT_ROUTE)
async def post_draft(request: Request) -> JSONResponse:
    async def op(c: ControlState) -> BaseModel:
        return await c.load_draft(await _body(request, sc.DraftLoadRequest))
    return await _handle(request, op)


@router.post(sc.CAPTURE_ROUTE)
async def post_capture(request: Request) -> JSONResponse:
    async def op(c: ControlState) -> BaseModel:
        return await c.set_capture(await _body(request, sc.CaptureRequest))
    return await _handle(request, op)


@router.post(sc.SPECULATION_ROUTE)
async def post_speculation(request: Request) -> JSONResponse:
    async def op(c: ControlState) -> BaseModel:
        return await c.set_speculation(await _body(request, sc.SpeculationRequest))
    return await _handle(request, op)


def _launch_facts(args: Namespace) -> tuple[str, bool, bool, str | None, str | None]:
    """(model name, runtime speculation switch available, launched with speculation, local draft dir,
    the draft as given: a path, s3:// or a hub id)."""
    names = getattr(args, "served_model_name", None)
    model_name = names[0] if names else str(args.model)
    spec = getattr(args, "speculative_config", None)
    if isinstance(spec, str):
        import json

        spec = json.loads(spec)
    spec = spec if isinstance(spec, dict) else (vars(spec) if spec is not None else None)
    scheduler = getattr(args, "scheduler_cls", None)
    runtime = isinstance(scheduler, str) and scheduler in SWITCH_SCHEDULERS
    draft_dir = str(spec.get("model")) if spec and spec.get("model") else None
    local = draft_dir if draft_dir and (Path(draft_dir) / "model.safetensors").is_file() else None
    return model_name, runtime, bool(spec), local, draft_dir


class TideControlPlugin:
    """Factory registered under `vllm.endpoint_plugins` (zero-argument class)."""

    name = "tide_control"
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        """Nothing on the API port: the routes get their own server in init_state."""

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        import vllm

        model_name, runtime, launched, draft_dir, launch_source = _launch_facts(args)
        settings = load_settings()
        control = ControlState(engine_client, settings, model_name=model_name, vllm_version=vllm.__version__,
                               runtime_speculation=runtime, launch_speculation=launched)
        control.current_dir = control.launch_dir = draft_dir
        control.launch_source = launch_source
        state.tide_control = control
        try:
            await control.refresh()
        except ControlFailure as failure:
            log.warning("tide: %s", failure.message)
        if control.worker and not control.engine_supported:
            log.warning("tide: %s", control.worker["engine"]["reason"])
        serving_metrics.register(control)
        await control.load_promoted()
        control.refresher = asyncio.get_running_loop().create_task(_refresh_forever(control))
        control.control_server = await _serve_control(control, getattr(args, "host", None), int(args.port))


class _ControlServer(uvicorn.Server):
    def capture_signals(self) -> Any:
        # vLLM's own server owns SIGTERM/SIGINT; this one ends with the event loop.
        return contextlib.nullcontext()


async def _serve_control(control: ControlState, host: str | None, api_port: int) -> asyncio.Task[None]:
    """Serve the routes on the control port of the API's address; fail the start on a clash."""
    port = control.settings.control_port
    if port == api_port:
        raise ValueError(f"{sc.CONTROL_PORT_ENV}={port} is the API port: the control routes need their own")
    app = FastAPI(title="tide-control", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    app.state.tide_control = control
    server = _ControlServer(uvicorn.Config(app, host=host or "0.0.0.0", port=port, log_level="warning",
                                           access_log=False))
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:  # bind now, so a taken port fails the start instead of a later call
        if task.done():
            task.result()
            raise OSError(f"tide control server on port {port} stopped before it started")
        await asyncio.sleep(0.05)
    log.info("tide: control routes on %s:%d", host or "0.0.0.0", port)
    return task


async def _refresh_forever(control: ControlState) -> None:
    while True:
        await asyncio.sleep(control.settings.metrics_refresh_s)
        try:
            await control.refresh()
        except ControlFailure as failure:
            log.debug("tide: metrics refresh failed: %s", failure.message)

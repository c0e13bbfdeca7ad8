"""KubeSim: the API-server emulator over real HTTP, with its simulators attached.

Owns one :class:`~kubesim.store.ObjectStore`, the aiohttp application that serves discovery,
resources, watches, the proxy and port-forward, and the simulator tasks (``Controller`` objects from
:mod:`kubesim.hooks`) that run beside it on the same event loop. Everything happens on that loop:
the store is not thread-safe, so code on other threads talks to kubesim over HTTP (the test fixture
does exactly that).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import yaml
from aiohttp import web

from kubesim import discovery, kubeconfig, reviews, routing
from kubesim.errors import ApiError, method_not_allowed, page_not_found
from kubesim.hooks import Controller, ProxyResolver, StoreReader
from kubesim.http_api import ResourceApi, error_response, json_response
from kubesim.portforward import PortForward
from kubesim.proxy import Proxy
from kubesim.resources import CRD_KEY, Registry
from kubesim.settings import KubeSimSettings
from kubesim.store import ObjectStore
from kubesim.watchhub import WatchHub

log = logging.getLogger(__name__)

# The C loader when available: CRD files are large and the pure-Python loader takes seconds.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def crd_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in the given YAML files or directories."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        for file in files:
            for doc in yaml.load_all(file.read_text(), Loader=_YAML_LOADER):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    docs.append(doc)
    return docs


class KubeSim:
    """An emulated Kubernetes API server on 127.0.0.1."""

    def __init__(
        self,
        *,
        settings: KubeSimSettings | None = None,
        port: int | None = None,
        controllers: Sequence[Controller] = (),
        proxy_resolvers: Sequence[ProxyResolver] = (),
        crd_paths: Sequence[Path] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the server (nothing listens before :meth:`start`).

        Args:
            settings: tunables; defaults documented on :class:`KubeSimSettings`.
            port: shortcut for ``settings.port`` (0 or None = a free port).
            controllers: simulators run as tasks beside the server (``kubesim.hooks.Controller``).
            proxy_resolvers: where the service/pod proxy forwards (``kubesim.hooks.ProxyResolver``).
            crd_paths: CRD YAML files or directories registered before the port opens.
            clock: wall clock for timestamps (injectable for tests).
        """
        self.settings = settings or KubeSimSettings()
        if port is not None:
            self.settings = replace(self.settings, port=port)
        self.registry = Registry()
        self.hub = WatchHub(window=self.settings.event_window)
        self.store = ObjectStore(registry=self.registry, hub=self.hub, clock=clock)
        self._controllers = list(controllers)
        self._api = ResourceApi(store=self.store, settings=self.settings)
        self._proxy = Proxy(store=self.store, resolvers=proxy_resolvers)
        self._port_forward = PortForward(store=self.store, resolvers=proxy_resolvers)
        self.proxy_resolvers: tuple[ProxyResolver, ...] = tuple(proxy_resolvers)
        """Where the proxies forward (tests reach the Ray dashboard registry through it)."""
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.controller_errors: list[BaseException] = []
        """Exceptions that ended a simulator task (each is also logged)."""
        self.port = self.settings.port
        self._bootstrap(crd_paths)

    @property
    def url(self) -> str:
        """Base URL of the API (``http://127.0.0.1:PORT``); valid after :meth:`start`."""
        return f"http://{self.settings.host}:{self.port}"

    # -- lifecycle -----------------------------------------------------------------------------

    def _bootstrap(self, crd_paths: Sequence[Path]) -> None:
        ns_info = self.registry.lookup("", "v1", "namespaces")
        assert ns_info is not None
        for name in _BOOT_NAMESPACES:
            self.store.create_object(ns_info, None, {"metadata": {"name": name}})
        svc_info = self.registry.lookup("", "v1", "services")
        assert svc_info is not None
        kubernetes_svc = {
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
        }
        self.store.create_object(svc_info, "default", kubernetes_svc)
        for doc in crd_documents(crd_paths):
            self.register_crd(doc)

    def register_crd(self, crd: dict[str, Any]) -> dict[str, Any]:
        """Create (or replace) a CRD in-process; its resource is served at once."""
        info = self.registry.lookup(*CRD_KEY[:1], "v1", CRD_KEY[1])
        assert info is not None
        name = str(crd.get("metadata", {}).get("name", ""))
        existing = self.store.find(CRD_KEY, "", name)
        body = {k: v for k, v in crd.items() if k != "status"}
        if existing is None:
            return self.store.create_object(info, None, body)
        body["metadata"] = {**body.get("metadata", {}), "resourceVersion": existing["metadata"]["resourceVersion"]}
        return self.store.update_object(info, None, name, body)

    async def start(self) -> None:
        """Bind the port, serve, and start the simulators."""
        app = web.Application(client_max_size=self.settings.max_body_bytes + 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port, backlog=1024)
        await site.start()
        self._runner = runner
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        self.store.handles_pod_termination = self.store.handles_pod_termination or any(
            getattr(c, "handles_pod_termination", False) for c in self._controllers
        )
        for resolver in self.proxy_resolvers:
            if isinstance(resolver, StoreReader):
                resolver.attach(self.store)
        for controller in self._controllers:
            task = asyncio.create_task(controller.run(self.store), name=f"kubesim:{type(controller).__name__}")
            task.add_done_callback(self._controller_done)
            self._tasks.append(task)
        log.info("kubesim serving", extra={"kubesim.url": self.url})

    def _controller_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.controller_errors.append(error)
            log.error("kubesim simulator %s crashed", task.get_name(), exc_info=error)

    async def stop(self) -> None:
        """Stop the simulators, close open watches and release the port."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._api.close_watches()
        await self._proxy.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def end_watches(self) -> None:
        """End every open watch stream after its pending events, as an API server restart would."""
        self._api.close_watches()

    @property
    def open_watches(self) -> int:
        """How many watch streams are open."""
        return self._api.open_watches

    async def __aenter__(self) -> KubeSim:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def write_kubeconfig(self, path: Path | str, *, namespace: str = "default") -> Path:
        """Write a kubeconfig for this server (usable by the official client and kubectl)."""
        return kubeconfig.write_kubeconfig(path, self.url, namespace=namespace)

    # -- HTTP ----------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as exc:
            return error_response(exc)
        except web.HTTPException:
            raise
        except Exception as exc:
            log.exception("kubesim request failed: %s %s", request.method, request.path)
            return error_response(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") if request.path != "/" else "/"
        parts = path.split("/")
        if request.method == "GET":
            answer = self._discovery(path, parts)
            if answer is not None:
                return answer
        if reviews.is_review(path):
            if request.method != "POST":
                raise method_not_allowed(request.method)
            body = await self._api.read_object(request)
            return json_response(reviews.answer(self.settings.access, path, body), 201)
        target = routing.parse(request.path)
        if target is None:
            raise page_not_found()
        if target.subresource == "proxy" and target.name is not None:
            info = self._api.resolve(target)
            return await self._proxy.forward(request, info, target.namespace or "", target.name, target.rest)
        if target.subresource == "portforward" and target.plural == "pods" and target.name is not None:
            self._api.resolve(target)
            return await self._port_forward.handle(request, target.namespace or "", target.name)
        return await self._api.handle(request, target)

    def _discovery(self, path: str, parts: list[str]) -> web.StreamResponse | None:
        registry = self.registry
        doc: Any = None
        if path == "/version":
            doc = discovery.VERSION_INFO
        elif path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        elif path == "/api":
            doc = discovery.api_versions(f"{self.settings.host}:{self.port}")
        elif path == "/apis":
            doc = discovery.api_groups(registry)
        elif len(parts) == 3 and parts[1] == "api":
            doc = discovery.resource_list(registry, "", parts[2])
        elif len(parts) == 3 and parts[1] == "apis":
            doc = discovery.api_group(registry, parts[2])
        elif len(parts) == 4 and parts[1] == "apis":
            doc = discovery.resource_list(registry, parts[2], parts[3])
        elif path == "/openapi/v3":
            doc = discovery.openapi_v3_index(registry)
        elif path.startswith("/openapi/v3/api/") and len(parts) == 5:
            doc = discovery.openapi_v3_document(registry, "", parts[4])
        elif path.startswith("/openapi/v3/apis/") and len(parts) == 6:
            doc = discovery.openapi_v3_document(registry, parts[4], parts[5])
        else:
            return None
        if doc is None:
            raise page_not_found()
        return json_response(doc)


def simulators_for(kubelet_mode: str, *, ray: str = "sim") -> tuple[list[Controller], list[ProxyResolver]]:
    """The simulators of a kubelet mode (``off`` = none; else built by ``kubesim.sims``); ``ray`` is
    ``sim`` (simulated Ray heads) or ``real`` (real ``ray start --head`` processes).

    Raises:
        RuntimeError: a mode other than ``off`` was asked for and ``kubesim.sims`` is unavailable.
    """
    if kubelet_mode == "off":
        try:
            from kubesim.sims.headurls import RecordedHeads
        except ImportError:
            return [], []
        # No simulator here, but simulators attached over HTTP may run heads: the proxies find them.
        return [], [RecordedHeads()]
    if kubelet_mode not in ("instant", "realistic"):
        raise ValueError(f"unknown kubelet mode {kubelet_mode!r} (off, instant, realistic)")
    try:
        from kubesim.sims import build_simulators
        from kubesim.sims.options import KubeletMode, RayMode
    except ImportError as exc:
        raise RuntimeError(f"kubelet mode {kubelet_mode!r} needs kubesim.sims.build_simulators") from exc
    controllers, resolvers = build_simulators(cast(KubeletMode, kubelet_mode), ray=cast(RayMode, ray))
    return list(controllers), list(resolvers)

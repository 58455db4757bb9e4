"""
The user's operator, run inside a test against a real server, and the waits that follow its work.

:class:`OperatorInTest` runs ``kopf run`` in a thread of the test process
(:class:`kopf.testing.KopfRunner`), scoped to the test's namespace, with the
test's kubeconfig; its log is kept as it comes, so that a failing test can
show it. :func:`is_handled` tells whether the operator has handled an object
as it is now, by what the framework itself writes when it concludes a cause:
the stored diff-base equals the object, and no handler's progress is left.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kopf._handlers.registries import OperatorRegistry, get_default_registry, set_default_registry
from kopf._storage.persistence import Persistence
from kopf._structs.bodies import Body
from kopf._testkit.cycles import resource_of
from kopf._testkit.kubeapi import TIMEOUT, KubeAPI, wait_for
from kopf._testkit.runner import KopfRunner
from kopf.config import OperatorConfig

FORMAT = '[%(asctime)s] %(threadName)-12.12s %(name)-20.20s [%(levelname)-8.8s] %(message)s'
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class OperatorInTest:
    """
    ``kopf run`` of the given files (or ``-m`` modules) in a thread, serving one namespace of one cluster.

    Started on creation; :meth:`stop` stops it gracefully. Each run gets a
    fresh default registry (unless ``registry=`` is given), so that the same
    operator can run in many tests of a session. ``log`` is what it has
    logged so far (all loggers of the process, while it runs).
    """

    def __init__(
            self,
            *targets: str | Path,
            kubeconfig: Path,
            namespace: str | None,
            modules: Sequence[str] = (),
            args: Sequence[str] = ('--verbose',),
            registry: OperatorRegistry | None = None,
            settings: OperatorConfig | None = None,
            ready_timeout: float = READY_TIMEOUT,
            name: str = '',
    ) -> None:
        if not targets and not modules:
            raise ValueError("Give the operator's files, or its modules with modules=[...].")
        self.name = name
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        scope = ['-n', namespace] if namespace else ['--all-namespaces']
        argv = ['run', *map(str, targets), *[f'--module={module}' for module in modules], *scope, *args]
        root = logging.getLogger()
        self._logging = (list(root.handlers), root.level)  # `kopf run` sets up logging its way: undone at the stop
        self._records: list[str] = []
        self._handler = _Collector(self._records)
        self._handler.setFormatter(logging.Formatter(FORMAT))
        logging.getLogger().addHandler(self._handler)
        self._previous = get_default_registry()
        set_default_registry(registry if registry is not None else OperatorRegistry())
        self.runner = KopfRunner(argv, env={'KUBECONFIG': str(kubeconfig)}, registry=registry, settings=settings,
                                 reraise=False, ready_timeout=ready_timeout, timeout=STOP_TIMEOUT)
        self.stopped = False
        self.runner.__enter__()
        if not self.runner.ready:
            self.stop()
            raise AssertionError(f"The operator did not start within {ready_timeout}s.\n{self.tail()}")
        if self.runner.finished:
            self.stop()
            raise AssertionError(f"The operator exited at its start.\n{self.tail()}")

    @property
    def log(self) -> str:
        """What has been logged since the start (the operator's and its handlers' messages)."""
        return '\n'.join(self._records)

    def tail(self, lines: int = 60) -> str:
        return '\n'.join(['--- the operator log (last lines) ---', *self._records[-lines:]])

    def wait_until_handled(self, obj: Mapping[str, Any] | str, *, timeout: float = TIMEOUT,
                           settings: OperatorConfig | None = None) -> Any:
        """
        Wait until the operator has handled the object (a dict, e.g. as created, or its URL path), and give it.

        A timeout fails with the object's path and this operator's log.
        """
        api = KubeAPI.from_kubeconfig(self.kubeconfig)
        if isinstance(obj, str):
            path = obj
        else:
            meta = obj.get('metadata') or {}
            path = api.path_of(obj['apiVersion'], obj['kind'], namespace=meta.get('namespace') or self.namespace,
                               name=meta['name'])
        return wait_until_handled(api, path, timeout=timeout, settings=settings or self.runner.settings,
                                  operator=self)

    @property
    def running(self) -> bool:
        return not self.stopped and not self.runner.finished

    def stop(self) -> None:
        """Stop it as Ctrl-C would, and wait; its exception (if it failed) is raised, with its log."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.runner.__exit__(None, None, None)
        finally:
            root = logging.getLogger()
            handlers, level = self._logging
            for handler in [handler for handler in root.handlers if handler not in handlers]:
                root.removeHandler(handler)
            root.setLevel(level)
            set_default_registry(self._previous)
        exception = self.runner.exception
        if exception is not None and not (isinstance(exception, SystemExit) and not exception.code):
            said = '\n'.join(self.runner.output.splitlines()[-20:])  # e.g. the command's own error message
            raise AssertionError(f"The operator has failed ({exception!r}); `kopf run` says:\n{said}\n"
                                 f"{self.tail()}") from None

    def __enter__(self) -> OperatorInTest:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> None:
        self.stop()


class _Collector(logging.Handler):
    """Keeps the formatted lines; thread-safe as every handler is (the lock of logging.Handler)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a message that cannot be formatted must not break the operator
            self.handleError(record)


def is_handled(obj: Mapping[str, Any] | None, *, settings: OperatorConfig | None = None,
               registry: OperatorRegistry | None = None) -> bool:
    """
    Whether the operator has handled the object as it is now: as the framework's own storages tell it.

    The diff-base stored by the last concluded cause equals the object's
    current essence, and no handler's progress is kept on it. ``settings``
    must be the operator's when it stores them elsewhere than in Kopf's
    default annotations.
    """
    if obj is None:
        return False
    config = settings if settings is not None else OperatorConfig()
    body = Body(dict(obj))
    extra = registry.get_extra_fields(resource_of(obj)) if registry is not None else []
    storage = Persistence(progress=config.persistence.progress_storage,
                          diffbase=config.persistence.diffbase_storage, body=body, extra_fields=extra)

    async def check() -> bool:
        essences = await storage.essences()
        if essences.old is None or essences.diff:
            return False
        try:
            records = config.persistence.progress_storage.list_records(body=body)
            found = await records if inspect.isawaitable(records) else records
        except NotImplementedError:
            return True
        return not found

    return bool(_run(check()))


def wait_until_handled(api: KubeAPI, path: str, *, timeout: float = TIMEOUT, settings: OperatorConfig | None = None,
                       registry: OperatorRegistry | None = None, operator: OperatorInTest | None = None) -> Any:
    """Poll the object until :func:`is_handled`, and give it; a timeout shows the object and the operator's log."""
    try:
        return wait_for(lambda: _handled_or_none(api.find(path), settings=settings, registry=registry),
                        timeout=timeout, what=f"{path} to be handled (its diff-base stored, no progress left)")
    except AssertionError as e:
        if operator is not None:
            raise AssertionError(f"{e}\n{operator.tail()}") from None
        raise


def _handled_or_none(obj: Any, *, settings: OperatorConfig | None, registry: OperatorRegistry | None) -> Any:
    return obj if is_handled(obj, settings=settings, registry=registry) else None


def _run(coro: Any) -> Any:
    """Run a coroutine to its end from sync code, also where an event loop runs (an async test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(coro)))
    thread.start()
    thread.join()
    return result[0]

"""
An endless, gap-free stream of changes of one resource.

Kubernetes watches are not endless: the server closes them on timeout, the
connection breaks, and a too-old ``resourceVersion`` is answered with ``410
Gone``. :func:`infinite_watch` hides all of that: it lists, watches from the
list's ``resourceVersion``, continues from the last seen version after every
reconnect, and relists when the version has expired.

Objects deleted while the watch was unable to follow (between an expired
version and the relist) produce no ``DELETED`` event from the server. To not
lose them, the watcher remembers the objects it has seen, and after a relist
yields a synthetic ``DELETED`` for each one missing from the new listing —
before the listing itself, so that a re-created object of the same name is not
mistaken for gone. Such synthetic events carry the last seen ``apiVersion``,
``kind``, identity (``name``, ``namespace``, ``uid``), ``resourceVersion``
and ``labels`` of the object, but no annotations, ``spec`` or ``status``: a
gone object needs no handling beyond its identity, and the watcher keeps what
it remembers of every watched object small -- a few strings, most of them
shared -- since it is kept for as long as the object exists.
"""
from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import math
import operator
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar

import aiohttp

from kopf._kube.errors import (
    APIConnectionError,
    APIGoneError,
    APIMalformedResponseError,
    APIServerError,
    APITooManyRequestsError,
    error_from_status,
)
from kopf._kube.fetching import ListPage, list_objs, list_pages
from kopf._kube.session import APIContext
from kopf._observability import recording
from kopf._observability.recording import WatchProbe
from kopf._structs import dormancy
from kopf._structs.bodies import object_key
from kopf._structs.clocks import Clock
from kopf._structs.resources import ParamValue, Resource
from kopf._structs.typedefs import Logger, RawEvent

EventType = Literal['ADDED', 'MODIFIED', 'DELETED']

_T = TypeVar('_T')


class WatchSettings(Protocol):
    """The watch settings this module needs; ``kopf.OperatorConfig().watching`` has them."""

    @property
    def server_timeout(self) -> float | None: ...

    @property
    def client_timeout(self) -> float | None: ...

    @property
    def connect_timeout(self) -> float | None: ...

    @property
    def inactivity_timeout(self) -> float | None: ...

    @property
    def reconnect_backoff(self) -> float: ...

    @property
    def max_reconnect_backoff(self) -> float: ...

    @property
    def list_limit(self) -> int | None: ...


async def infinite_watch(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        settings: WatchSettings,
        stop: asyncio.Event | None = None,
        logger: Logger | None = None,
        on_listed: Callable[[], None] | None = None,
) -> AsyncIterator[RawEvent]:
    """
    List the objects, then yield their changes, forever (until ``stop`` is set).

    Listed objects are yielded with ``type: None``; watch events as they come,
    except ``BOOKMARK`` (which only advances the ``resourceVersion``).
    ``on_listed`` is called after the last object of every (re)listing has
    been yielded -- i.e. consumed -- and before the watching starts.
    Connection errors and 5xx are retried with a growing back-off starting at
    ``settings.reconnect_backoff``, which resets as soon as a watch stream is
    established again; ``429`` waits as long as the server asks. A stream
    that stays silent longer than ``settings.inactivity_timeout`` is taken for
    a dead connection and re-opened. Other errors (e.g. 403 for missing RBAC
    permissions) are raised, since retrying cannot fix them. The back-offs
    are waited on the context's clock.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    stopper = _Stopper(stop, clock=context.clock)
    tracker = _Tracker(log)
    probe = recording.current().watch(resource, namespace)
    delay = settings.reconnect_backoff
    where = f"{resource}" + (f" in {namespace!r}" if namespace is not None else "")
    while not stopper.is_set():
        try:
            if tracker.resource_version is None and tracker.known is None:
                # The first listing: page by page, the next one requested while this one is handled.
                tracker.start_streaming()
                pages = list_pages(context=context, resource=resource, namespace=namespace,
                                   limit=settings.list_limit, logger=log)
                async with contextlib.aclosing(pages):
                    while True:
                        page = await stopper.race(anext(pages, None))
                        if page is _STOPPED:
                            return
                        if page is None:
                            break
                        delay = settings.reconnect_backoff
                        probe.listed(len(page.items))
                        for event in tracker.streamed(page):
                            yield event
                            if stopper.is_set():
                                return
                        del page
                if on_listed is not None:
                    on_listed()
            elif tracker.resource_version is None:
                listing = await stopper.race(list_objs(context=context, resource=resource, namespace=namespace,
                                                       limit=settings.list_limit, logger=log))
                if listing is _STOPPED:
                    return
                items, resource_version = listing
                if not resource_version:
                    raise APIMalformedResponseError(f"The listing of {where} has no resourceVersion to watch from",
                                                    status=200)
                delay = settings.reconnect_backoff
                probe.listed(len(items))
                for event in tracker.relisted(items, resource_version):
                    yield event
                    if stopper.is_set():
                        return
                if on_listed is not None:
                    on_listed()

            stream = _watch_once(context=context, resource=resource, namespace=namespace,
                                 settings=settings, resource_version=tracker.resource_version,
                                 stopper=stopper, log=log)
            async with contextlib.aclosing(stream), _open(probe):
                async for raw in stream:
                    if raw is _OPENED:
                        delay = settings.reconnect_backoff  # the server is there and accepts us
                        probe.opened()
                        log.debug("The watch of %s is open from resourceVersion %r.", where, tracker.resource_version)
                        continue
                    watched = tracker.watched(raw)
                    if watched is not None:
                        probe.event(str(watched['type']))
                        yield watched
                    if stopper.is_set():
                        return
            probe.restarted('closed')
            log.debug("The watch of %s has ended; continuing from resourceVersion %r.",
                      where, tracker.resource_version)
            continue
        except APIGoneError:
            probe.restarted('expired')
            log.info("The resourceVersion %r of %s has expired; relisting.", tracker.resource_version, where)
            tracker.resource_version = None
            continue
        except asyncio.TimeoutError:
            probe.restarted('timeout')
            log.debug("The watch of %s has timed out; continuing from resourceVersion %r.",
                      where, tracker.resource_version)
            continue
        except WatchGarbledError as e:
            probe.restarted('garbled')
            log.warning("The watch of %s %s; reconnecting from resourceVersion %r in %.2fs.",
                        where, e, tracker.resource_version, delay)
        except WatchStalledError as e:
            probe.restarted('stalled')
            log.warning("The watch of %s %s: the connection is probably dead; "
                        "reconnecting from resourceVersion %r in %.2fs.", where, e, tracker.resource_version, delay)
        except APITooManyRequestsError as e:
            probe.restarted('throttled')
            delay = max(delay, e.retry_after or 0.0)
            log.warning("The watch of %s is throttled by the server (429 Too Many Requests); "
                        "reconnecting in %.2fs.", where, delay)
        except (APIServerError, APIConnectionError, aiohttp.ClientError) as e:
            probe.restarted('error')
            quiet = context.reachability.covers(e, what=f"the watch of {where}")  # said once for all requests
            (log.debug if quiet else log.warning)("The watch of %s has failed: %s; reconnecting in %.2fs.",
                                                  where, e, delay)
        await stopper.sleep(delay)
        delay = min(delay * 2, max(settings.max_reconnect_backoff, settings.reconnect_backoff))


@contextlib.asynccontextmanager
async def _open(probe: WatchProbe) -> AsyncIterator[None]:
    """A watch request's lifetime, for the probe: it is closed whatever ends it."""
    try:
        yield
    finally:
        probe.closed()


class WatchGarbledError(Exception):
    """
    A watch stream carried a line that is no event: it is given up, and watched again from the last good version.

    Skipping the line would skip its event for good once a later event moves
    the resourceVersion on; watching again from the version before it gets it again.
    """


class WatchStalledError(Exception):
    """A watch stream carried nothing for too long, or its request got no answer: a dead connection."""


class _OpenedType(enum.Enum):
    OPENED = 'opened'


_OPENED = _OpenedType.OPENED


async def _watch_once(
        *,
        context: APIContext,
        resource: Resource,
        namespace: str | None,
        settings: WatchSettings,
        resource_version: str | None,
        stopper: _Stopper,
        log: Logger,
) -> AsyncGenerator[Mapping[str, Any] | _OpenedType, None]:
    """One watch request: ``_OPENED`` once established, then the raw events until it ends."""
    params: dict[str, ParamValue] = {
        'watch': True,
        'allowWatchBookmarks': True,
        'resourceVersion': resource_version or None,
        'timeoutSeconds': math.ceil(settings.server_timeout) if settings.server_timeout is not None else None,
    }
    url = resource.get_url(server=context.server, namespace=namespace, params=params)
    inactivity = settings.inactivity_timeout
    async with contextlib.AsyncExitStack() as stack:
        opening = stack.enter_async_context(context.stream(
            'GET', url, timeout=settings.client_timeout, connect_timeout=settings.connect_timeout,
            read_timeout=inactivity))
        try:
            response = await stopper.race(opening)
        except asyncio.TimeoutError:
            raise WatchStalledError("got no answer to the watch request in time") from None
        if response is _STOPPED:
            return
        yield _OPENED
        splitter = LineSplitter()
        while True:
            try:
                chunk = await stopper.race(response.content.readany())
            except aiohttp.SocketTimeoutError:
                raise WatchStalledError(f"has been silent for {inactivity:g}s, not even a bookmark") from None
            if chunk is _STOPPED:
                return
            lines = splitter.feed(chunk) if chunk else splitter.flush()
            for line in lines:
                yield _parse_line(line)
            if not chunk:
                return


def _parse_line(line: bytes) -> Mapping[str, Any]:
    """One event of a watch stream; a line that is no JSON object ends the stream (see :class:`WatchGarbledError`)."""
    try:
        event = json.loads(line)
    except ValueError:
        raise WatchGarbledError(f"has sent an unreadable line: {line[:200]!r}") from None
    if not isinstance(event, Mapping):
        raise WatchGarbledError(f"has sent a line that is no event: {line[:200]!r}")
    return event


class LineSplitter:
    """
    Reassemble newline-delimited lines from arbitrary chunks of a stream.

    Chunks split lines anywhere, and one line (one object) may span many
    chunks; the pieces are kept in a list and joined once, so that large
    objects do not cost quadratic time.
    """

    def __init__(self) -> None:
        self._pieces: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines completed by this chunk (without the newlines, empty ones skipped)."""
        if b'\n' not in chunk:
            self._pieces.append(chunk)
            return []
        head, *middle, tail = chunk.split(b'\n')
        first = b''.join(self._pieces + [head])
        self._pieces = [tail] if tail else []
        return [line for line in [first, *middle] if line.strip()]

    def flush(self) -> list[bytes]:
        """The last line if the stream ended without a newline."""
        rest = b''.join(self._pieces)
        self._pieces = []
        return [rest] if rest.strip() else []


class _Tracker:
    """
    The watch's memory: the last resourceVersion, and the objects seen (to detect deletions).

    The objects are remembered for as long as they exist, so their memory is
    packed into one block of bytes while the watch is quiet (see
    :mod:`kopf._structs.dormancy`).
    """

    def __init__(self, log: Logger) -> None:
        self.log = log
        self.resource_version: str | None = None
        self._known: dormancy.Dormant[dict[str, _Stub]] | None = None  # by identity; None until the first listing
        self._streaming: dict[str, _Stub] | None = None  # the first listing's objects while its pages come
        self._voided: dict[str, _Stub] | None = None  # those of its pages voided by a restart
        self._shared = _Shared()

    @property
    def known(self) -> dict[str, _Stub] | None:
        return None if self._known is None else self._known.value

    def start_streaming(self) -> None:
        """A new attempt of the first listing: what an earlier attempt has listed is void."""
        voided = {**(self._voided or {}), **(self._streaming or {})}
        self._voided = voided or None
        self._streaming = {}

    def streamed(self, page: ListPage) -> list[RawEvent]:
        """
        Events for one page of the first listing, as it comes.

        Nothing was known before it, so nothing can have vanished unseen but
        the objects of pages voided by a restarted listing (an expired continue
        token): those missing from the complete new listing are reported as
        deleted after its last page (by their uids, so that a re-created
        object of the same name is a different object).
        """
        if self._streaming is None or page.restarted:
            self.start_streaming()
        assert self._streaming is not None
        for item in page.items:
            self._remember(self._streaming, item)
        events: list[RawEvent] = [{'type': None, 'object': item} for item in page.items]
        if page.resource_version is not None:  # the last page
            known, self._streaming = self._streaming, None
            voided, self._voided = self._voided or {}, None
            events.extend({'type': 'DELETED', 'object': stub.revive()}
                          for key, stub in voided.items() if key not in known)
            self._known = dormancy.Dormant(known, pack=_pack_stubs, unpack=_unpack_stubs)
            self.resource_version = page.resource_version
        return events

    def relisted(self, items: list[dict[str, Any]], resource_version: str) -> list[RawEvent]:
        """Events for a fresh listing: synthetic deletions of vanished objects, then the listing."""
        previous = self.known
        self._shared = _Shared()  # only the values that are still in use are shared from now on
        known: dict[str, _Stub] = {}
        for item in items:
            self._remember(known, item)
        if self._known is None:
            self._known = dormancy.Dormant(known, pack=_pack_stubs, unpack=_unpack_stubs)
        else:
            self._known.value = known  # the same box: its timer must not keep the previous memory
        events: list[RawEvent] = []
        if previous is not None:
            for key, stub in previous.items():
                if key not in known:
                    events.append({'type': 'DELETED', 'object': stub.revive()})
        events.extend({'type': None, 'object': item} for item in items)
        self.resource_version = resource_version
        return events

    def watched(self, raw: Mapping[str, Any]) -> RawEvent | None:
        """The event to yield for a raw watch event, if any; errors are raised as typed errors."""
        kind = raw.get('type')
        obj = raw.get('object')
        if not isinstance(obj, dict):
            self.log.warning("Skipping a watch event without an object: %r", raw)
            return None
        if kind == 'ERROR':
            raise error_from_status(obj, where='watch stream')
        version = (obj.get('metadata') or {}).get('resourceVersion')
        if version:
            self.resource_version = str(version)
        if kind == 'BOOKMARK':
            return None
        if kind not in ('ADDED', 'MODIFIED', 'DELETED'):
            self.log.warning("Skipping a watch event of an unknown type: %r", kind)
            return None
        known = self.known
        if known is not None:
            if kind == 'DELETED':
                known.pop(object_key(obj), None)
            else:
                self._remember(known, obj)
        return {'type': kind, 'object': obj}

    def _remember(self, known: dict[str, _Stub], obj: Mapping[str, Any]) -> None:
        key = object_key(obj)
        stub = known.get(key)
        if stub is None:
            stub = known[key] = _Stub()
        stub.update(obj, key=key, shared=self._shared)


class _Shared:
    """
    One copy of each value that many objects have in common (``apiVersion``, ``kind``, namespaces).

    Only for values of few kinds: made anew at every relisting, and emptied
    when it grows big anyway, so that it never keeps values of objects long
    gone.
    """

    LIMIT = 1000

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if len(self._values) >= self.LIMIT and value not in self._values:
            self._values.clear()
        return self._values.setdefault(value, value)


class _Stub:
    """
    What the watch remembers of one existing object, to report it as deleted should it vanish unseen.

    It lives as long as the object, so it is as small as it can be: a few
    references in a slotted object, to strings of which most are shared or
    kept anyway (the uid is the key of :attr:`_Tracker.known`). It is updated
    in place, so that an event of a known object allocates nothing that stays
    but its new ``resourceVersion``.
    """

    __slots__ = ('api_version', 'kind', 'labels', 'name', 'namespace', 'resource_version', 'uid')

    def __init__(self) -> None:
        self.api_version: Any = _MISSING
        self.kind: Any = _MISSING
        self.name: Any = _MISSING
        self.namespace: Any = _MISSING
        self.uid: Any = _MISSING
        self.resource_version: Any = _MISSING
        self.labels: Any = _MISSING

    def update(self, obj: Mapping[str, Any], *, key: str, shared: _Shared) -> None:
        """Remember the object as this event shows it; equal strings already kept are kept, not replaced."""
        meta = obj.get('metadata') or {}
        name = meta.get('name', _MISSING)
        uid = meta.get('uid', _MISSING)
        self.api_version = shared(obj.get('apiVersion', _MISSING))
        self.kind = shared(obj.get('kind', _MISSING))
        self.namespace = shared(meta.get('namespace', _MISSING))
        self.name = self.name if self.name == name else name
        self.uid = self.uid if self.uid == uid else key if uid == key else uid
        self.resource_version = meta.get('resourceVersion', _MISSING)
        labels = meta.get('labels') or _MISSING
        self.labels = self.labels if self.labels == labels else labels

    def packed(self) -> tuple[Any, ...]:
        """The fields as plain values (``None`` for missing ones): for :mod:`marshal`."""
        return tuple([None if value is _MISSING else value for value in _STUB_FIELDS(self)])

    @classmethod
    def unpacked(cls, values: tuple[Any, ...]) -> _Stub:
        stub = cls()
        for name, value in zip(cls.__slots__, values):
            setattr(stub, name, _MISSING if value is None else value)
        return stub

    def revive(self) -> dict[str, Any]:
        """The object as a synthetic ``DELETED`` event carries it."""
        fields = {'name': self.name, 'namespace': self.namespace, 'uid': self.uid,
                  'resourceVersion': self.resource_version, 'labels': self.labels}
        obj: dict[str, Any] = {'apiVersion': self.api_version, 'kind': self.kind,
                               'metadata': {k: v for k, v in fields.items() if v is not _MISSING}}
        return {k: v for k, v in obj.items() if v is not _MISSING}


class _MissingType(enum.Enum):
    MISSING = 'missing'


_MISSING = _MissingType.MISSING


_STUB_FIELDS = operator.attrgetter(*_Stub.__slots__)


def _pack_stubs(known: dict[str, _Stub]) -> dict[str, tuple[Any, ...]]:
    return {key: stub.packed() for key, stub in known.items()}


def _unpack_stubs(packed: dict[str, tuple[Any, ...]]) -> dict[str, _Stub]:
    return {key: _Stub.unpacked(values) for key, values in packed.items()}


class _StoppedType(enum.Enum):
    STOPPED = 'stopped'


_STOPPED = _StoppedType.STOPPED


class _Stopper:
    """Lets every wait of the watcher end early and cleanly when the stop event is set."""

    def __init__(self, stop: asyncio.Event | None, *, clock: Clock) -> None:
        self._stop = stop
        self._clock = clock

    def is_set(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def race(self, awaitable: Awaitable[_T]) -> _T | _StoppedType:
        """The awaitable's result, or ``_STOPPED`` (and the awaitable cancelled) if stopped first."""
        if self._stop is None:
            return await awaitable
        task = asyncio.ensure_future(awaitable)
        if self._stop.is_set():
            task.cancel()
            return _STOPPED
        waiter = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task})  # let it clean up; its outcome is checked below
        if task.cancelled():
            return _STOPPED
        if task.exception() is not None and self.is_set():
            return _STOPPED  # an error while stopping is not worth reporting
        return task.result()

    async def sleep(self, delay: float) -> None:
        """Wait for ``delay`` seconds of the clock, or until stopped."""
        await self.race(self._clock.sleep(delay))

"""
An independent watch of the objects: when did each handler's success first reach the server?

A handler's success is persisted when its progress annotation says so, or
when the whole cause is done (the last-handled configuration is stored); a
call that starts after that moment is a re-run after a visible success.

The witness lists the objects before it returns, so that nothing created
afterwards escapes it. By default any failure of its own watch (an error
event, a connection refused) fails the test that asks it, since a witness
that missed an event could hide a re-run; ``outlasts_outages=True`` makes it
relist after such a failure instead, for the tests that stop the control
plane or compact its history on purpose.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

from kopf.testing import KubeAPI

LAST_HANDLED = 'last-handled-configuration'


class _Relist(Exception):
    """The watch has ended with an error event (e.g. 410 Gone): the history is to be listed anew."""


class Witness:
    def __init__(self, kube: KubeAPI, collection: str, *, handlers: tuple[str, ...],
                 prefix: str = 'kopf.zalando.org', outlasts_outages: bool = False) -> None:
        self.kube = kube
        self.collection = collection
        self.handlers = handlers
        self.prefix = prefix
        self.outlasts_outages = outlasts_outages
        self.persisted: dict[tuple[str, str], float] = {}
        self.done: dict[str, float] = {}
        self.failures = 0
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._version: str | None = self._list()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def finished(self, names: list[str]) -> bool:
        self._check()
        with self.lock:
            return set(names) <= set(self.done)

    def reruns(self, calls: list[Any]) -> list[Any]:
        """The calls (with ``name``, ``handler``, ``start``) that started after their success was visible."""
        self._check()
        with self.lock:
            return [call for call in calls
                    if (at := self.persisted.get((call.name, call.handler))) is not None and call.start > at]

    def _check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"The witness has failed: {self.error!r}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._version: str | None = self._list()
                self._watch()
            except Exception as e:
                if not self.outlasts_outages:
                    self.error = e
                    return
                self.failures += 1
                self._version = None
                self._stop.wait(0.2)

    def _list(self) -> str:
        listing = self.kube.request('GET', self.collection, timeout=5)
        for item in listing['items']:
            self.note(item)
        return str(listing['metadata']['resourceVersion'])

    def _watch(self) -> None:
        while not self._stop.is_set():
            query = urllib.parse.urlencode({'watch': 'true', 'timeoutSeconds': '2', 'resourceVersion': self._version,
                                            'allowWatchBookmarks': 'true'})
            url = f"{self.kube.server}{self.collection}?{query}"
            with urllib.request.urlopen(url, context=self.kube.ssl, timeout=10) as response:
                for line in response:
                    event = json.loads(line)
                    if event['type'] == 'ERROR':
                        raise _Relist(event['object'])
                    self._version = event['object']['metadata']['resourceVersion']
                    if event['type'] != 'BOOKMARK':
                        self.note(event['object'])

    def note(self, obj: dict[str, Any]) -> None:
        seen = time.time()
        meta = obj['metadata']
        annotations = meta.get('annotations') or {}
        done = f'{self.prefix}/{LAST_HANDLED}' in annotations
        with self.lock:
            for handler in self.handlers:
                value = annotations.get(f'{self.prefix}/{handler}')
                if done or (value and json.loads(value).get('success')):
                    self.persisted.setdefault((meta['name'], handler), seen)
            if done:
                self.done.setdefault(meta['name'], seen)

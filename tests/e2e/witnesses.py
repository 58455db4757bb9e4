"""
An independent watch of the objects that survives outages: when did each handler's success reach the server?

Like the witness of the replica tests, but it relists after any failure (a
server that is away, a 410 Gone), so that it keeps watching across a
restart of the control plane. A handler's success is persisted when its
progress annotation says so, or when the whole cause is done (the
last-handled configuration is stored); a call that starts after that moment
is a re-run after a visible success.
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


class Witness:
    def __init__(self, kube: KubeAPI, collection: str, *, handlers: tuple[str, ...],
                 prefix: str = 'kopf.zalando.org') -> None:
        self.kube = kube
        self.collection = collection
        self.handlers = handlers
        self.prefix = prefix
        self.persisted: dict[tuple[str, str], float] = {}
        self.done: dict[str, float] = {}
        self.failures = 0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def finished(self, names: list[str]) -> bool:
        with self.lock:
            return set(names) <= set(self.done)

    def reruns(self, calls: list[Any]) -> list[Any]:
        """The calls (with ``name``, ``handler``, ``start``) that started after their success was visible."""
        with self.lock:
            return [call for call in calls
                    if (at := self.persisted.get((call.name, call.handler))) is not None and call.start > at]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.kube.request('GET', self.collection, timeout=5)
                for item in listing['items']:
                    self.note(item)
                self._watch(listing['metadata']['resourceVersion'])
            except Exception:
                self.failures += 1
                self._stop.wait(0.2)

    def _watch(self, version: str) -> None:
        while not self._stop.is_set():
            query = urllib.parse.urlencode({'watch': 'true', 'timeoutSeconds': '2', 'resourceVersion': version,
                                            'allowWatchBookmarks': 'true'})
            url = f"{self.kube.server}{self.collection}?{query}"
            with urllib.request.urlopen(url, context=self.kube.ssl, timeout=10) as response:
                for line in response:
                    event = json.loads(line)
                    if event['type'] == 'ERROR':
                        return  # e.g. 410 Gone: relist
                    version = event['object']['metadata']['resourceVersion']
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

"""
The API server's own count of the requests it has served: ``apiserver_request_total``.

Read from ``/metrics`` before and after a measured phase; the difference says
what every client together has requested meanwhile, by verb and resource.
"""
from __future__ import annotations

import collections
import re
from typing import NamedTuple

_LINE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class RequestKind(NamedTuple):
    verb: str
    group: str
    resource: str
    subresource: str

    def __str__(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource or '(non-resource)'
        return f"{self.verb} {resource}" + (f"/{self.subresource}" if self.subresource else '')


Counts = collections.Counter[RequestKind]


def parse(text: str) -> Counts:
    """Requests by kind, summed over response codes, scopes and versions."""
    counts: Counts = collections.Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match['labels']))
        kind = RequestKind(labels.get('verb', ''), labels.get('group', ''),
                           labels.get('resource', ''), labels.get('subresource', ''))
        counts[kind] += int(float(match['value']))
    return counts


def delta(after: Counts, before: Counts) -> Counts:
    """What was requested between two readings (never negative)."""
    result: Counts = collections.Counter()
    for kind, value in after.items():
        if value - before.get(kind, 0) > 0:
            result[kind] = value - before.get(kind, 0)
    return result

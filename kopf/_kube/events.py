"""
Posting Kubernetes Events about objects (``kubectl describe`` shows them).

Events are a courtesy to the humans watching the cluster: a failure to post
one is logged and forgotten, and never interrupts the handling of the object.
"""
from __future__ import annotations

import datetime
import logging
import socket
from collections.abc import Mapping
from typing import Any

from kopf._kube.session import APIContext
from kopf._structs.typedefs import Logger

MAX_MESSAGE_LENGTH = 1024
COMPONENT = 'kopf'
NAME_PREFIX = 'kopf-event-'


async def post_event(
        *,
        context: APIContext,
        ref: Mapping[str, Any],
        type: str,
        reason: str,
        message: str,
        logger: Logger | None = None,
        component: str = COMPONENT,
        instance: str | None = None,
        name_prefix: str = NAME_PREFIX,
) -> None:
    """
    Post a core v1 Event about the referenced object; log (never raise) on failure.

    ``component`` and ``instance`` say who reports it (the instance defaults
    to the host name); ``name_prefix`` starts its name (the server adds a
    unique suffix).

    ``ref`` has the object's ``apiVersion``, ``kind``, ``name``, ``namespace``
    and ``uid``. Events of cluster-scoped objects go to the ``default``
    namespace, as Kubernetes itself does. The given logger must not post its
    messages as events itself, or a failure would feed itself.
    """
    log: Logger = logger if logger is not None else logging.getLogger(__name__)
    body = build_event(ref=ref, type=type, reason=reason, message=message, component=component,
                       instance=instance, name_prefix=name_prefix, now=context.clock.now())
    namespace = body['metadata']['namespace']
    try:
        await context.request('POST', f'/api/v1/namespaces/{namespace}/events', json=body)
    except Exception as e:  # any failure: events must never break the handling
        log.warning("Failed to post an event about %s %s (%s: %s): %s",
                    ref.get('kind'), ref.get('name'), reason, body['message'], e)


def build_event(
        *,
        ref: Mapping[str, Any],
        type: str,
        reason: str,
        message: str,
        component: str = COMPONENT,
        instance: str | None = None,
        name_prefix: str = NAME_PREFIX,
        now: datetime.datetime,
) -> dict[str, Any]:
    """The Event of what happened ``now``: a new one each time (count 1), named by the prefix + the server's suffix."""
    stamp = now.astimezone(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
    namespace = ref.get('namespace') or 'default'
    if len(message) > MAX_MESSAGE_LENGTH:
        message = message[:MAX_MESSAGE_LENGTH - 3] + '...'
    return {
        'apiVersion': 'v1',
        'kind': 'Event',
        'metadata': {
            'namespace': namespace,
            'generateName': name_prefix,
        },
        'involvedObject': {
            key: ref[key] for key in ('apiVersion', 'kind', 'name', 'namespace', 'uid') if ref.get(key)
        },
        'type': type,
        'reason': reason,
        'message': message,
        'source': {'component': component},
        'reportingComponent': component,
        'reportingInstance': (instance if instance is not None else socket.gethostname())[:128],
        'firstTimestamp': stamp,
        'lastTimestamp': stamp,
        'count': 1,
    }

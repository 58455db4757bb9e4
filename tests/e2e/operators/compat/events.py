"""
Event handlers and posted Kubernetes Events, as a Kopf user writes them.

Every call is recorded as a JSON line in ``$E2E_CALLS``, with the event's type.
"""
import json
import os
from typing import Any

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 10
    settings.posting.reporting_component = 'compat-operator'
    settings.posting.event_name_prefix = 'compat-event-'


@kopf.on.event('kopfcompats')
def every_event(name: str, type: kopf.RawEventType, event: kopf.RawEvent, **_: Any) -> None:
    record('every_event', name, type=type, same=event['type'] == type)


@kopf.on.event('kopfcompats')
def failing(name: str, **_: Any) -> None:
    record('failing', name)
    raise RuntimeError("Event handlers are not retried.")


@kopf.on.create('kopfcompats')
def post(body: kopf.Body, logger: kopf.Logger, name: str, **_: Any) -> None:
    record('post', name)
    kopf.event(body, type='Custom', reason='SomeReason', message='Some message')
    kopf.info(body, reason='InfoReason', message='Some info')
    kopf.warn(body, reason='WarnReason', message='Some warning')
    try:
        raise ValueError("Exception text.")
    except ValueError:
        kopf.exception(body, reason='ErrorReason', message='Some exception:')
        kopf.exception(body, message='Without a reason:')
    logger.info("Log lines are not posted by default.")

"""
An operator with several quick create handlers, for counting the API requests per object.

* ``E2E_RESOURCE``: the resource, e.g. ``quicks.e2e.kopf.dev``.
* ``E2E_HANDLERS``: how many create handlers (3 by default); their ids are ``h0``, ``h1``, ...
* ``E2E_RESULT``: what every handler returns, as JSON (by default, nothing).
* ``E2E_CALLS``: a JSON-lines file where every handler call is recorded.
"""
import json
import os
import pathlib

import kopf

RESOURCE = os.environ['E2E_RESOURCE']
HANDLERS = int(os.environ.get('E2E_HANDLERS', '3'))
RESULT = json.loads(os.environ.get('E2E_RESULT', 'null'))
CALLS = pathlib.Path(os.environ['E2E_CALLS'])


def make_handler(handler_id):
    def handler(name, **_):
        with CALLS.open('a') as f:
            f.write(json.dumps({'handler': handler_id, 'object': name, 'pid': os.getpid()}) + '\n')
        return RESULT
    return handler


for index in range(HANDLERS):
    kopf.on.create(RESOURCE, id=f'h{index}')(make_handler(f'h{index}'))

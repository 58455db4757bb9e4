"""
A parent with a quick sub-handler and a long one: the quick one's success must be stored while the long one runs.

The long one is long only in the first process (a marker file says it has started once), so that a restart
in the middle of it is cheap to wait for.
"""
import json
import os
import time
from pathlib import Path

import kopf

MARKER = Path(os.environ['E2E_CALLS']).with_suffix('.started')


def record(handler, name):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, 'pid': os.getpid()}) + '\n')


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.create('configmaps', labels={'sub': 'yes'})
def parent(name, **_):
    def quick(**_):
        record('quick', name)
        return 'quick-result'

    def slow(**_):
        record('slow', name)
        if not MARKER.exists():
            MARKER.touch()
            time.sleep(30)  # the test kills the operator long before this is over

    kopf.register(quick, id='quick')
    kopf.register(slow, id='slow')

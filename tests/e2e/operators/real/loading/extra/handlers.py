"""A second operator file, from another directory, with its own sibling import."""
import json
import os

from extra_naming import suffix

import kopf


@kopf.on.event('configmaps', labels={'loading': 'yes'})
def also_loaded(name, **_):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': 'also_loaded', 'name': name, 'suffix': suffix()}) + '\n')

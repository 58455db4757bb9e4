"""
An operator in a file called ``operator.py`` (as many are), importing a module that lives beside it.

It must not shadow the standard library's ``operator``: ``fractions`` uses it when imported.
"""
import fractions
import json
import os

from naming import child_name

import kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.event('configmaps', labels={'loading': 'yes'})
def loaded(name, **_):
    with open(os.environ['E2E_CALLS'], 'a') as f:
        f.write(json.dumps({'handler': 'loaded', 'name': name, 'child': child_name(name),
                            'third': str(fractions.Fraction(1, 3))}) + '\n')

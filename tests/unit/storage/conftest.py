import copy

import pytest

from kopf._structs.bodies import Body
from kopf._structs.patches import Patch, apply


@pytest.fixture()
def raw():
    return {
        'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
        'metadata': {'name': 'ex1', 'namespace': 'ns1', 'annotations': {'user': 'value'}},
        'spec': {'field': 'x'},
    }


@pytest.fixture()
def body(raw):
    return Body(raw)


def applied(body: Body, patch: Patch) -> Body:
    """What the server would hold after the patch: used to check round-trips."""
    return Body(apply(copy.deepcopy(dict(body.raw)), dict(patch)))

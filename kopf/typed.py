"""
Typed resources (the ``kopf[typed]`` extra, on pydantic v2): declare a custom resource as a model.

.. code-block:: python

    import kopf, kopf.typed, pydantic

    class MyAppSpec(pydantic.BaseModel):
        image: str
        replicas: int = pydantic.Field(1, ge=1, le=10)

    class MyApp(kopf.typed.CustomResource, group='example.com', version='v1'):
        spec: MyAppSpec

    @kopf.on.create(MyApp)
    def created(spec: MyAppSpec, **_):
        ...  # spec.replicas is an int; body['spec'] is the raw mapping

``kopf manifests`` makes the CRD of every such class (see docs/deploying.rst).
"""
try:
    import pydantic  # noqa: F401
except ImportError as e:  # the extra is not installed: say so, in one line, where it is imported
    raise ImportError("kopf.typed needs pydantic v2: pip install 'kopf[typed]'.") from e

from kopf._typed.models import Condition, CustomResource, PrinterColumn
from kopf._typed.schemas import SchemaError

__all__ = ['Condition', 'CustomResource', 'PrinterColumn', 'SchemaError']

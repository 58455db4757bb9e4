"""
Typed resources: custom resources declared as pydantic models, validated before handlers see them.

The tour:

* :mod:`.models` is what users write (with pydantic, the ``kopf[typed]``
  extra): :class:`~.models.CustomResource`, whose class keywords name the
  resource (group, version, kind, plural, scope, short names, printer
  columns) and whose fields are the spec and status models;
* :mod:`.gate` is what the handling cycle asks before it calls the handlers
  of a typed resource: is the spec valid (then the handlers get the model),
  and if not, what to report -- once per change of the spec, as a log line,
  a Kubernetes Event and, where the status has conditions, a condition;
* :mod:`.schemas` turns a model's JSON schema into a structural OpenAPI v3
  schema that the API server accepts, or says which class and field cannot
  be one; :mod:`.crds` builds the CustomResourceDefinitions of the classes
  (all versions of a kind in one CRD).

Only :mod:`.models` and :mod:`.crds` import pydantic; the gate and the
schemas work on what the models give them, so that the cycle runs without
the extra installed.
"""

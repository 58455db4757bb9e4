"""
Built-in resources: ConfigMaps labelled `kopf-example: "yes"`.

Built-in resources have fixed schemas: there is no room for anything of
ours in their status (ConfigMaps have no status at all). kopf keeps the
handlers' progress and the last handled configuration in annotations, so
several handlers with retries work here exactly as on custom resources.

The handlers return nothing: a returned value goes to the object's status,
which a ConfigMap does not have (kopf would warn that the server dropped it).
"""
import kopf

SELECTED = {'kopf-example': 'yes'}


@kopf.on.create('configmaps', labels=SELECTED)
def count_keys(body, logger, **kwargs):
    keys = sorted(body.get('data', {}))
    logger.info(f"The ConfigMap has {len(keys)} key(s): {', '.join(keys)}")


@kopf.on.create('configmaps', labels=SELECTED)
def measure_size(retry, body, logger, **kwargs):
    if retry < 1:
        raise kopf.TemporaryError("Measuring once more in a second.", delay=1)
    size = sum(len(value) for value in body.get('data', {}).values())
    logger.info(f"The data is {size} characters long (attempt #{retry + 1}).")


@kopf.on.update('configmaps', labels=SELECTED)
def data_changed(diff, logger, **kwargs):
    for operation, field, old, new in diff:
        logger.info(f"Data change: {operation} {'.'.join(field)}: {old!r} -> {new!r}")


@kopf.on.event('configmaps', labels=SELECTED)
def seen(type, name, logger, **kwargs):
    # Every watch event, without retries or progress; `type` is None for
    # objects found by the initial listing.
    logger.debug(f"Event {type} for {name}.")


# Only protected ConfigMaps get kopf's finalizer: the annotations filter
# decides which objects the delete handler (and so the finalizer) applies to.
@kopf.on.delete('configmaps', labels=SELECTED, annotations={'kopf.dev/protect': kopf.PRESENT})
def protected_deletion(name, logger, **kwargs):
    logger.info(f"The protected ConfigMap {name} is being deleted.")

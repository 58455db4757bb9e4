"""
The operator that `make demo` runs: three create handlers and a delete handler.

The second create handler is not ready on its first attempt and asks to be
retried 3 seconds later, so that the stored progress can be seen on the
object in the meantime.
"""
import kopf


@kopf.on.create('kopfexamples')
def provision(spec, name, logger, **kwargs):
    logger.info(f"Provisioning storage for {name} ({spec.get('size', '1Gi')}).")
    return {'volume': f"vol-{name}", 'size': spec.get('size', '1Gi')}


@kopf.on.create('kopfexamples')
def configure(retry, logger, **kwargs):
    if retry == 0:
        raise kopf.TemporaryError("The database is not ready yet.", delay=3)
    logger.info(f"Configured on attempt #{retry + 1}.")
    return {'configured': True, 'attempts': retry + 1}


@kopf.on.create('kopfexamples')
def announce(name, logger, **kwargs):
    logger.info(f"Announcing {name}.")
    return {'announced': True}


@kopf.on.delete('kopfexamples')
def release(name, logger, **kwargs):
    logger.info(f"Releasing the storage of {name}.")

"""
The smallest useful operator: one handler for new KopfExample objects.

Whatever the handler returns is stored in the object's status under the
handler's id: here, `status.create_fn`.
"""
import kopf


@kopf.on.create('kopfexamples')
def create_fn(spec, name, namespace, logger, **kwargs):
    logger.info(f"A new KopfExample {namespace}/{name} with the spec: {dict(spec)}")
    return {'message': f"hello, {name}", 'field': spec.get('field')}

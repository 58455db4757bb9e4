"""
The whole life of an object: creation, changes, deletion.

* The update handler gets `old`, `new` and `diff` of the object's essence
  (spec, labels, annotations), compared with the last handled state.
* The field handler reacts to one field only (on creation and on changes),
  and sees `old`, `new` and `diff` of that field.
* The delete handler makes kopf put a finalizer on the object, so that the
  deletion waits until the handler has succeeded.
"""
import kopf


@kopf.on.create('kopfexamples')
def create_fn(spec, logger, **kwargs):
    logger.info(f"Created with field={spec.get('field')!r}.")
    return 'created'


@kopf.on.update('kopfexamples')
def update_fn(old, new, diff, logger, **kwargs):
    for operation, field, old_value, new_value in diff:
        logger.info(f"{operation} {'.'.join(field)}: {old_value!r} -> {new_value!r}")
    return {'changes': len(diff)}


@kopf.on.field('kopfexamples', field='spec.field')
def field_fn(old, new, logger, **kwargs):
    logger.info(f"spec.field: {old!r} -> {new!r}")
    return {'old': old, 'new': new}


@kopf.on.delete('kopfexamples')
def delete_fn(name, logger, **kwargs):
    logger.info(f"Cleaning up after {name}.")

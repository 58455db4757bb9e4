"""
Sub-handlers: handlers created at runtime, e.g. one per item of a list.

Each sub-handler has its own id (`parent/child`), its own progress and its
own retries. The parent is finished when all its sub-handlers are; a
sub-handler that has succeeded is never called again, even if the parent is.
"""
import kopf


@kopf.on.create('kopfexamples')
def create_fn(spec, logger, **kwargs):
    # Called again in every cycle until all sub-handlers are done: it must
    # register the same sub-handlers every time, with the same ids.
    for item in spec.get('items', []):

        def handle_item(retry, item=item, **kwargs):
            if item.endswith('2') and retry < 1:
                raise kopf.TemporaryError(f"{item} is not ready yet.", delay=1)
            logger.info(f"{item} is handled.")
            return {'item': item, 'attempts': retry + 1}

        kopf.register(handle_item, id=f"item-{item}")


@kopf.on.create('kopfexamples')
async def execute_fn(logger, **kwargs):
    # In async handlers, sub-handlers can be run right away and in place:
    # execute() returns only when all of them have succeeded.
    await kopf.execute(fns={'first': first, 'second': second})
    logger.info("Both sub-handlers are done.")
    return 'all done'


def first(**kwargs):
    return 1


async def second(**kwargs):
    return 2

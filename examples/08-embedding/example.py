"""
Embedding: the operator as one task of your own asyncio application.

Instead of `kopf run`, this script runs `kopf.operator()` next to its own
task (a heartbeat here; a web server or a queue consumer in real life) in
one event loop. The application stops the operator by setting a stop
flag (here: after EXAMPLE_RUNTIME seconds, if set, and on Ctrl-C or
SIGTERM, which the application handles itself).

    python example.py                # all namespaces
    EXAMPLE_NAMESPACE=default python example.py
"""
import asyncio
import collections
import logging
import os
import signal

import kopf


@kopf.on.create('kopfexamples')
def create_fn(name, memo: kopf.Memo, logger, **kwargs):
    # Each object's memo is a shallow copy of the application's: the Counter in it is the very same one.
    memo.counts['created'] += 1
    logger.info(f"{name} is handled by the embedded operator ({memo.counts['created']} so far).")
    return {'embedded': True}


async def heartbeat(memo: kopf.Memo) -> None:
    """The application's own work, in the same event loop as the operator."""
    while True:
        logging.info(f"The application is alive; objects handled: {memo.counts['created']}.")
        await asyncio.sleep(2)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(levelname)s %(message)s')
    namespace = os.environ.get('EXAMPLE_NAMESPACE')
    runtime = float(os.environ['EXAMPLE_RUNTIME']) if os.environ.get('EXAMPLE_RUNTIME') else None

    stop_flag = asyncio.Event()
    ready_flag = asyncio.Event()
    # The operator's memo. Every object gets a shallow copy of it as its own `memo`: keys set there stay the
    # object's, but mutable values (this Counter) are shared by all objects and with the application.
    memo = kopf.Memo(counts=collections.Counter())

    # With a stop flag, kopf.operator() leaves the signals to the application:
    # here, Ctrl-C and SIGTERM stop the operator gracefully through the flag.
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop_flag.set)
    operator = asyncio.create_task(kopf.operator(
        namespaces=[namespace] if namespace else (),
        clusterwide=namespace is None,
        memo=memo,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    ))
    app = asyncio.create_task(heartbeat(memo))

    try:
        # Wait until the operator is ready -- or has failed to start (e.g. no cluster access).
        ready = asyncio.create_task(ready_flag.wait())
        await asyncio.wait([ready, operator], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if ready_flag.is_set():
            logging.info("The operator is ready: it watches its resources now.")
            if runtime is not None:
                asyncio.get_running_loop().call_later(runtime, stop_flag.set)
        await operator  # returns once the operator has stopped; raises if it has failed
    finally:
        app.cancel()
    logging.info(f"The operator has exited; {memo.counts['created']} object(s) handled. Bye.")


if __name__ == '__main__':
    asyncio.run(main())

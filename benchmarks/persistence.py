"""
Benchmark: the cost of persisting handler progress, per handling cycle.

Simulates the full life of one object's creation with N handlers, where every
handler fails once and succeeds on its retry, through the real handling cycle
(``kopf._cycle.cycle.handle_object``) and the default storages, with the
server simulated by applying each patch in memory. Prints figures; asserts
nothing. Run: ``python benchmarks/persistence.py``.
"""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
import tracemalloc

import kopf
from kopf._cycle import cycle
from kopf._handlers import progression
from kopf._structs.bodies import Body
from kopf._structs.patches import apply
from kopf._structs.resources import Selector


def build_registry(n: int) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    for i in range(n):
        def fn(retry: int, **_: object) -> None:
            if retry == 0:
                raise kopf.TemporaryError("once", delay=0.001)
        kopf.on.create('kopfexamples', id=f'handler-{i:03d}', registry=registry)(fn)
    return registry


async def run_object(n: int, storage_name: str) -> dict[str, float]:
    registry = build_registry(n)
    config = kopf.OperatorConfig()
    if storage_name == 'status':
        config.persistence.progress_storage = kopf.StatusProgressStorage()
    config.execution.max_workers = 4
    raw = {'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
           'metadata': {'name': 'ex', 'namespace': 'ns', 'uid': 'u', 'resourceVersion': '1'},
           'spec': {'field': 'x' * 100}}
    logger = logging.getLogger('bench')
    cycles, patch_bytes, max_annotations = 0, 0, 0
    started = time.perf_counter()
    first = True
    while True:
        result = await cycle.handle_object(
            registry=registry, config=config, resource=Selector.from_args('kopfexamples'),
            event_type='MODIFIED', body=Body(raw), first_seen=first, memo=None, logger=logger)
        first = False
        cycles += 1
        patch_bytes += len(json.dumps(result.patch))
        raw = apply(copy.deepcopy(raw), dict(result.patch))
        max_annotations = max(max_annotations, len(json.dumps(raw['metadata'].get('annotations', {}))))
        if result.done and not result.patch:
            break
        if result.delay:
            await asyncio.sleep(result.delay)
    elapsed = time.perf_counter() - started
    return {'cycles': cycles, 'seconds': elapsed, 'ms_per_cycle': elapsed / cycles * 1000,
            'patch_bytes': patch_bytes, 'max_annotations_bytes': max_annotations}


async def main() -> None:
    logging.disable(logging.CRITICAL)
    print(f"{'storage':<8} {'handlers':>8} {'cycles':>7} {'ms/cycle':>9} {'patch KiB':>10} "
          f"{'peak annotations KiB':>21} {'peak memory KiB':>16}")
    for storage_name in ['smart', 'status']:
        for n in [1, 10, 50, 100]:
            tracemalloc.start()
            figures = await run_object(n, storage_name)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"{storage_name:<8} {n:>8} {figures['cycles']:>7} {figures['ms_per_cycle']:>9.2f} "
                  f"{figures['patch_bytes'] / 1024:>10.1f} {figures['max_annotations_bytes'] / 1024:>21.1f} "
                  f"{peak / 1024:>16.0f}")

    # The storages alone: records fetched and stored per second.
    storage = kopf.SmartProgressStorage()
    record = progression.HandlerState.from_scratch().as_record()
    body = Body({'metadata': {'annotations': {'kopf.zalando.org/fn': json.dumps(record)}}})
    rounds = 20000
    started = time.perf_counter()
    for _ in range(rounds):
        storage.fetch(key='fn', body=body)  # type: ignore[arg-type]
    fetch_rate = rounds / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(rounds):
        storage.store(key='fn', record=record, body=body, patch=kopf.Patch())  # type: ignore[arg-type]
    store_rate = rounds / (time.perf_counter() - started)
    print(f"\nSmartProgressStorage: {fetch_rate:,.0f} fetches/s, {store_rate:,.0f} stores/s")


if __name__ == '__main__':
    asyncio.run(main())

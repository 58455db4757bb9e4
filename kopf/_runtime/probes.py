"""
The probe handlers behind the liveness endpoint (``kopf run --liveness URL``).

The endpoint itself (HTTP, caching, what "healthy" means) is in
:mod:`kopf._runtime.probing`; this module gives it the way to run the
``@kopf.on.probe`` handlers: each once per run, without retries -- a
liveness check is repeated by its caller anyway, and a probe that sleeps
for its back-off would only make the endpoint hang.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from kopf._handlers.registries import Activity, ActivityHandler, OperatorRegistry
from kopf._runtime import activities, probing
from kopf.config import OperatorConfig
from kopf.errors import ActivityError, ErrorsMode


async def serve_liveness(
        url: str | None,
        *,
        health: probing.Health,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        indexes: Mapping[str, Any] | None = None,
) -> probing.LivenessServer | None:
    """Start the liveness endpoint if one is asked for; raises :class:`probing.LivenessError` if it cannot."""
    if url is None:
        return None

    async def run() -> Mapping[str, Any]:
        return await run_probes(registry=registry, config=config, memo=memo, indexes=indexes)

    server = probing.LivenessServer(url, health=health,
                                    probes=probing.ProbeCache(run, period=lambda: config.probing.cache_period))
    await server.start()
    return server


async def run_probes(
        *,
        registry: OperatorRegistry,
        config: OperatorConfig,
        memo: Any,
        indexes: Mapping[str, Any] | None = None,
) -> Mapping[str, Any]:
    """The probes' results by id; :class:`probing.ProbeError` names the failed ones and their errors."""
    once = OperatorRegistry()
    for handler in registry.get_activity_handlers(Activity.PROBE):
        once.register_activity_handler(_once(handler))
    try:
        results = await activities.run_activity(registry=once, activity=Activity.PROBE, config=config, memo=memo,
                                              logger=_quiet_logger, indexes=indexes)
    except ActivityError as e:
        failures = '; '.join(f"{id}: {type(error).__name__}: {error}" for id, error in e.errors.items())
        raise probing.ProbeError(failures) from e
    return {str(id): result for id, result in results.items()}


def _once(handler: ActivityHandler) -> ActivityHandler:
    """One attempt; an unexpected exception fails the probe unless its ``errors=`` says otherwise."""
    return dataclasses.replace(handler, retries=1, errors=handler.errors or ErrorsMode.PERMANENT)


class _QuietLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Probes run every few seconds: their routine messages go to DEBUG, their failures stay visible."""

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        super().log(logging.DEBUG if level == logging.INFO else level, msg, *args, **kwargs)


_quiet_logger = _QuietLogger(logging.getLogger('kopf.activities.probe'), {})

"""
An operator written as for Kopf 1.x: annotated with Kopf's type names, with probes and events.

* Probes: ``answer`` (42) and ``marker``, which fails while the file ``$E2E_PROBE_FAIL`` exists.
* ConfigMaps labelled ``e2e``: the handler logs at INFO and WARNING, posts the three explicit
  events (``kopf.info``, ``kopf.warn``, ``kopf.event``), and logs through an object logger of
  its own settings that post log messages, and through a local one that never posts.
* With ``$E2E_EVERYTHING`` (a file): every object of any resource labelled ``e2e-everything``
  is written to that file by an event handler of ``kopf.EVERYTHING``.
"""
import os
import pathlib

import kopf

PROBE_FAIL = pathlib.Path(os.environ['E2E_PROBE_FAIL'])


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.probing.cache_period = float(os.environ.get('E2E_PROBE_CACHE', '0.2'))
    settings.watching.server_timeout = 10


@kopf.on.probe(id='answer')
def answer(**_: object) -> int:
    return 42


@kopf.on.probe(id='marker')
def marker(**_: object) -> str:
    if PROBE_FAIL.exists():
        raise RuntimeError(PROBE_FAIL.read_text())
    return 'fine'


@kopf.on.create('configmaps', labels={'e2e': kopf.PRESENT})
def created(body: kopf.Body, meta: kopf.Meta, labels: kopf.Labels, logger: kopf.Logger, **_: object) -> str:
    logger.info("Logged at INFO: %s", meta.name)
    logger.warning("Logged at WARNING: %s", labels['e2e'])
    kopf.info(body, reason='ExplicitInfo', message='explicit info')
    kopf.warn(body, reason='ExplicitWarn', message='explicit warn')
    posting = kopf.OperatorSettings()
    posting.posting.loggers = True
    kopf.ObjectLogger(body=body, settings=posting).warning("Logged through a posting object logger.")
    kopf.LocalObjectLogger(body=body, settings=posting).warning("Logged locally only.")
    kopf.event(body, type='Custom', reason='ExplicitEvent', message='explicit event')
    return 'done'


if os.environ.get('E2E_EVERYTHING'):
    SEEN = pathlib.Path(os.environ['E2E_EVERYTHING'])

    @kopf.on.event(kopf.EVERYTHING, labels={'e2e-everything': kopf.PRESENT})
    def anything(body: kopf.Body, type: kopf.RawEventType, **_: object) -> None:
        with SEEN.open('a') as f:
            f.write(f"{body.get('kind')}/{body.metadata.name}\n")

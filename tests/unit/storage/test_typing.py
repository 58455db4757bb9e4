"""
Users' storages type-check under ``mypy --strict``, whether their methods are plain or ``async def``.

A snippet with both kinds of subclasses (and a wrong one, which must be reported)
is checked by mypy itself, as a user's CI would check it.
"""
import pathlib
import textwrap

from mypy import api

# The project's own mypy cache: warm after `make test` has run mypy on kopf.
CACHE = pathlib.Path(__file__).parents[3] / '.mypy_cache'

SNIPPET = textwrap.dedent('''
    from __future__ import annotations

    import kopf
    from kopf._structs.bodies import Essence
    from kopf._structs.ids import HandlerId


    class SyncStorage(kopf.ProgressStorage):
        def __init__(self) -> None:
            self.records: dict[str, kopf.ProgressRecord] = {}

        def fetch(self, *, key: str, body: kopf.Body) -> kopf.ProgressRecord | None:
            return self.records.get(key)

        def store(self, *, key: str, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch) -> None:
            self.records[key] = record

        def purge(self, *, key: str, body: kopf.Body, patch: kopf.Patch) -> None:
            self.records.pop(key, None)

        def erase(self, *, body: kopf.Body) -> None:
            self.records.clear()


    class AsyncStorage(kopf.ProgressStorage):
        async def fetch(self, *, key: str, body: kopf.Body) -> kopf.ProgressRecord | None:
            return None

        async def store(self, *, key: str, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch) -> None:
            pass

        async def purge(self, *, key: str, body: kopf.Body, patch: kopf.Patch) -> None:
            pass

        async def flush(self) -> None:
            pass

        async def erase(self, *, body: kopf.Body) -> None:
            pass

        async def __aenter__(self) -> AsyncStorage:
            return self


    class AsyncDiffBase(kopf.DiffBaseStorage):
        async def fetch(self, *, body: kopf.Body) -> Essence | None:
            return None

        async def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Essence) -> None:
            pass


    class AuditedMulti(kopf.MultiProgressStorage):
        def fetch(self, *, key: HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
            record = super().fetch(key=key, body=body)
            assert not isinstance(record, Awaitable)
            return record


    from collections.abc import Awaitable

    storages: list[kopf.ProgressStorage] = [SyncStorage(), AsyncStorage(), AuditedMulti([SyncStorage()])]
    diffbases: list[kopf.DiffBaseStorage] = [AsyncDiffBase(), kopf.AnnotationsDiffBaseStorage()]


    class Wrong(kopf.ProgressStorage):
        def fetch(self, *, key: str, body: kopf.Body) -> int:  # not a record: reported
            return 0

        def store(self, *, key: str, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch) -> None:
            pass

        def purge(self, *, key: str, body: kopf.Body, patch: kopf.Patch) -> None:
            pass
''')


def test_sync_and_async_storages_type_check_and_wrong_ones_do_not(tmp_path):
    path = tmp_path / 'user_storages.py'
    path.write_text(SNIPPET)
    stdout, stderr, _ = api.run(['--strict', '--no-error-summary', '--python-version', '3.11',
                                      '--cache-dir', str(CACHE), str(path)])
    errors = [line for line in stdout.splitlines() if ': error:' in line]
    assert len(errors) == 1, stdout + stderr
    assert 'Return type "int" of "fetch" incompatible' in errors[0], errors

"""
A guided demo of kopf: a real operator, a real Kubernetes API server, and what happens in between.

    make demo            # or: python tools/demo.py

It starts a local control plane (etcd + kube-apiserver, built with Go on first
use), installs the example CRD, runs tools/demo_operator.py with `kopf run`,
creates one object, and narrates -- from the object as the API server sees it
-- how the handlers progress: the progress annotations, a retry, the purge,
the last handled configuration, the results in the status. Then it deletes
the object (the delete handler runs, the finalizer is released) and stops
everything. Nothing outside of a temporary directory is touched; an earlier,
interrupted run is cleaned up automatically.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for `python tools/demo.py` from anywhere

import yaml  # noqa: E402

from kopf.testing import ControlPlane, ControlPlaneError, KubeAPI, KubeAPIError, wait_for  # noqa: E402

NAMESPACE = 'kopf-demo'
NAME = 'demo'
PREFIX = 'kopf.zalando.org'
LAST_HANDLED = f'{PREFIX}/last-handled-configuration'
TOUCH = f'{PREFIX}/touch-dummy'
HANDLERS = ('provision', 'configure', 'announce')
OPERATOR = REPO / 'tools' / 'demo_operator.py'
PHASE_TIMEOUT = 60.0
LOG_LINE = re.compile(r'^\[[^\]]+\] (?P<logger>\S+)\s+\[(?P<level>\w+)\s*\] (?:\[[^\]]+\] )?(?P<message>.*)$')


class DemoFailed(Exception):
    """Something the demo expected did not happen."""


# Output.

_started = time.monotonic()
_print_lock = threading.Lock()


def say(text: str = '', *, detail: bool = False) -> None:
    """Print one line of the story, with the time since the demo's start."""
    with _print_lock:
        if not text:
            print(flush=True)
        elif detail:
            print(f"{'':9}{text}", flush=True)
        else:
            print(f"[{time.monotonic() - _started:6.1f}s] {text}", flush=True)


def heading(text: str) -> None:
    with _print_lock:
        print(f"\n=== {text} ===", flush=True)


# The moving parts: the operator process and the watch of the object.

def _die_with_parent() -> None:
    """In the operator's process: stop it if the demo itself is killed (Linux), to leave nothing behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class OperatorProcess:
    """`kopf run tools/demo_operator.py` with its log lines passed on to the demo's event queue."""

    def __init__(self, kubeconfig: Path, events: queue.Queue[tuple[str, Any]]) -> None:
        env = {**os.environ, 'KUBECONFIG': str(kubeconfig), 'PYTHONPATH': str(REPO), 'PYTHONUNBUFFERED': '1'}
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'kopf', 'run', str(OPERATOR), '-n', NAMESPACE],
            env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, preexec_fn=_die_with_parent if sys.platform == 'linux' else None)
        self._reader = threading.Thread(target=self._read, args=(events,), daemon=True)
        self._reader.start()

    def _read(self, events: queue.Queue[tuple[str, Any]]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip('\n'))
            events.put(('log', line.rstrip('\n')))
        events.put(('exited', self.process.wait()))

    def stop(self, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._reader.join(timeout=5)
        return self.process.returncode


class ObjectWatch:
    """Every change of the demo object, put into the queue as the API server reports it (a watch)."""

    def __init__(self, plane: ControlPlane, resource_version: str, events: queue.Queue[tuple[str, Any]]) -> None:
        self.response: Any = None
        self.closed = False
        self.thread = threading.Thread(target=self._watch, args=(plane, resource_version, events), daemon=True)
        self.thread.start()

    def close(self) -> None:
        """End the watch, so that the API server has no open request when it is stopped."""
        self.closed = True
        if self.response is not None:
            with contextlib.suppress(Exception):
                self.response.fp.raw._sock.shutdown(2)  # unblock the reading thread
            with contextlib.suppress(Exception):
                self.response.close()
        self.thread.join(timeout=5)

    def _watch(self, plane: ControlPlane, resource_version: str, events: queue.Queue[tuple[str, Any]]) -> None:
        try:
            watch_object(plane, resource_version, events, self)
        except Exception as e:  # the watch ends with the control plane; only a premature end matters
            if not self.closed:
                events.put(('watch-ended', e))


def watch_object(plane: ControlPlane, resource_version: str, events: queue.Queue[tuple[str, Any]],
                 holder: ObjectWatch) -> None:
    """Put every change of the demo object into the queue."""
    query = urllib.parse.urlencode({
        'watch': 'true', 'resourceVersion': resource_version, 'timeoutSeconds': '600',
        'fieldSelector': f'metadata.name={NAME}',
    })
    url = f"{plane.server}/apis/kopf.dev/v1/namespaces/{NAMESPACE}/kopfexamples?{query}"
    with urllib.request.urlopen(url, context=plane.ssl_context(), timeout=600) as response:
        holder.response = response
        for line in response:
            if line.strip():
                events.put(('watch', json.loads(line)))
    if not holder.closed:
        events.put(('watch-ended', 'the server has closed it'))


# The narration.

def _short_time(value: str) -> str:
    return datetime.datetime.fromisoformat(value).strftime('%H:%M:%S.%f')[:-3]


def _meaning(record: dict[str, Any]) -> str:
    attempts = record.get('retries') or 0
    if record.get('success'):
        return f"it has succeeded (after {attempts} attempt{'s' if attempts != 1 else ''})."
    if record.get('failure'):
        return f"it has failed for good: {record.get('message')}"
    if record.get('delayed'):
        delayed = datetime.datetime.fromisoformat(record['delayed'])
        seconds = (delayed - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        return (f"attempt #{attempts} has failed ({record.get('message')!r}); the next attempt is due at "
                f"{_short_time(record['delayed'])} UTC, in {max(seconds, 0):.1f}s.")
    return ("it has not been attempted yet: the record only notes when the handling began "
            "(timeouts count from then).")


class Narrator:
    """Compares every version of the object with the previous one and tells what kopf has changed."""

    def __init__(self) -> None:
        self.previous: dict[str, Any] = {}
        self.uid: str | None = None
        self.records: dict[str, list[dict[str, Any]]] = {}  # every progress record seen, per handler
        self.most_at_once = 0
        self.touched = False
        self.purged: list[str] = []
        self.diffbase: str | None = None
        self.results: dict[str, Any] = {}
        self.finalizer_added = False
        self.finalizer_removed = False
        self.deletion_seen = False
        self.gone = False

    def event(self, event: dict[str, Any]) -> None:
        obj = event.get('object') or {}
        if event.get('type') == 'ERROR':
            raise DemoFailed(f"The watch has failed: {obj.get('message')}")
        if event.get('type') == 'DELETED':
            ours = [f for f in self.previous.get('metadata', {}).get('finalizers') or [] if f.startswith(PREFIX)]
            if ours:
                # The server reports the deleted object as it was before the finalizer was removed.
                self.finalizer_removed = True
                say(f"kopf has removed its finalizer {ours[0]!r} after the delete handler had succeeded.")
            self.gone = True
            say("The object is gone: it had no finalizers left, so Kubernetes deleted it at once.")
            return
        if event.get('type') == 'ADDED':
            self.uid = obj['metadata']['uid']
            say(f"The object {NAMESPACE}/{NAME} exists now (uid {self.uid[:8]}...). "
                f"kopf sees it through its own watch.")
        self._metadata(obj)
        self._annotations(obj)
        self._status(obj)
        self.previous = obj

    def _metadata(self, obj: dict[str, Any]) -> None:
        meta, old_meta = obj.get('metadata', {}), self.previous.get('metadata', {})
        finalizers, old_finalizers = meta.get('finalizers') or [], old_meta.get('finalizers') or []
        for finalizer in finalizers:
            if finalizer not in old_finalizers:
                self.finalizer_added = True
                say(f"kopf has added its finalizer {finalizer!r}, before running any handler:")
                say("the object cannot disappear now until the delete handler has run.", detail=True)
        for finalizer in old_finalizers:
            if finalizer not in finalizers:
                self.finalizer_removed = True
                say(f"kopf has removed its finalizer {finalizer!r}: the deletion may proceed.")
        if meta.get('deletionTimestamp') and not old_meta.get('deletionTimestamp'):
            self.deletion_seen = True
            say(f"Kubernetes has marked the object for deletion (deletionTimestamp {meta['deletionTimestamp']}),")
            say("but keeps it because of the finalizer: kopf's delete handlers run now.", detail=True)

    def _annotations(self, obj: dict[str, Any]) -> None:
        annotations = obj.get('metadata', {}).get('annotations') or {}
        old = self.previous.get('metadata', {}).get('annotations') or {}
        progress = {k: v for k, v in annotations.items()
                    if k.startswith(f'{PREFIX}/') and k not in (LAST_HANDLED, TOUCH)}
        old_progress = {k: v for k, v in old.items() if k.startswith(f'{PREFIX}/') and k not in (LAST_HANDLED, TOUCH)}
        self.most_at_once = max(self.most_at_once, len(progress))
        for key, value in progress.items():
            if old_progress.get(key) != value:
                handler = key.split('/', 1)[1]
                record = json.loads(value)
                self.records.setdefault(handler, []).append(record)
                say(f"Progress of the handler {handler!r}, stored in the annotation {key}:")
                say(value, detail=True)
                say(f"-> {_meaning(record)}", detail=True)
        gone = sorted(set(old_progress) - set(progress))
        if gone:
            self.purged.extend(gone)
            say(f"kopf has purged the progress annotations ({', '.join(k.split('/', 1)[1] for k in gone)}):")
            say("the cause is fully handled, so the progress is of no use any more.", detail=True)
        if TOUCH in annotations and annotations.get(TOUCH) != old.get(TOUCH):
            self.touched = True
            say(f"kopf has set {TOUCH}={annotations[TOUCH]!r}: a dummy change that makes the API")
            say("server send a fresh event, which wakes the object's handling up for the retry.", detail=True)
        elif TOUCH in old and TOUCH not in annotations:
            say(f"kopf has removed {TOUCH}: no more retries are pending.")
        if annotations.get(LAST_HANDLED) and annotations.get(LAST_HANDLED) != old.get(LAST_HANDLED):
            self.diffbase = annotations[LAST_HANDLED]
            say(f"kopf has stored the last handled configuration in {LAST_HANDLED}:")
            say(self.diffbase, detail=True)
            say("-> the object's essence (spec, labels, ...) as handled: future changes are compared with it.",
                detail=True)

    def _status(self, obj: dict[str, Any]) -> None:
        status, old = obj.get('status') or {}, self.previous.get('status') or {}
        for key, value in status.items():
            if old.get(key) != value:
                self.results[key] = value
                say(f"The result of the handler {key!r} is in status.{key}: {json.dumps(value)}")

    @property
    def created_and_handled(self) -> bool:
        annotations = self.previous.get('metadata', {}).get('annotations') or {}
        pending = [k for k in annotations if k.startswith(f'{PREFIX}/') and k != LAST_HANDLED]
        return bool(self.diffbase) and not pending and all(h in self.results for h in HANDLERS)


def _show_log_line(line: str, facts: dict[str, Any]) -> None:
    """Show the operator's own log lines, shortened; remember the ones the summary needs."""
    match = LOG_LINE.match(line)
    if match is None:
        say(f"  operator | {line}")
        return
    level, message = match['level'], match['message']
    if "Handler 'release' succeeded." in message:
        facts['delete_handler'] = True
    say(f"  operator | {level:<7} {message}")


def run_until(events: queue.Queue[tuple[str, Any]], narrator: Narrator, facts: dict[str, Any],
              done: Any, what: str) -> None:
    """Tell everything that happens until `done()` is true; fail after a while."""
    deadline = time.monotonic() + PHASE_TIMEOUT
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DemoFailed(f"Timed out after {PHASE_TIMEOUT:.0f}s waiting for {what}.")
        try:
            kind, payload = events.get(timeout=remaining)
        except queue.Empty:
            continue
        if kind == 'watch':
            narrator.event(payload)
        elif kind == 'log':
            _show_log_line(payload, facts)
        elif kind == 'exited':
            raise DemoFailed(f"The operator has exited unexpectedly with code {payload}.")
        elif kind == 'watch-ended':
            raise DemoFailed(f"The demo's watch of the object has ended: {payload}")


def drain(events: queue.Queue[tuple[str, Any]], narrator: Narrator, facts: dict[str, Any], seconds: float) -> None:
    """Tell what arrives within a short while (e.g. the operator's last log lines)."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            kind, payload = events.get(timeout=remaining)
        except queue.Empty:
            return
        if kind == 'watch':
            narrator.event(payload)
        elif kind == 'log':
            _show_log_line(payload, facts)


# The demo.

def install_crd(api: KubeAPI, crd: dict[str, Any]) -> None:
    """Create the CRD in the fresh control plane and wait until its resource is served."""
    api.create('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"

    def established() -> bool:
        conditions = (api.get(path).get('status') or {}).get('conditions') or []
        return any(c.get('type') == 'Established' and c.get('status') == 'True' for c in conditions)

    wait_for(established, timeout=30, what="the CRD to be established")
    wait_for(lambda: _served(api, f"/apis/kopf.dev/v1/namespaces/{NAMESPACE}/kopfexamples"), timeout=30,
             what="kopfexamples to be served")


def _served(api: KubeAPI, path: str) -> bool:
    try:
        api.get(path)
    except KubeAPIError:
        return False
    return True


def check_prerequisites() -> None:
    if os.environ.get('KOPF_CONTROLPLANE_BIN') or shutil.which('go'):
        return
    print(
        "The demo runs a local Kubernetes control plane (etcd + kube-apiserver), which is built\n"
        "from source with Go on first use -- but Go is not installed here ('go' is not on PATH).\n"
        "\n"
        "Either install Go 1.24 or newer (https://go.dev/dl/) and run `make demo` again,\n"
        "or try kopf against a Kubernetes cluster you already have (kubectl and a kubeconfig):\n"
        "\n"
        "    kubectl apply -f examples/crd.yaml\n"
        "    kopf run examples/01-minimal/example.py --verbose      # uses $KUBECONFIG or ~/.kube/config\n"
        "    kubectl apply -f examples/obj.yaml                     # in another terminal\n"
        "\n"
        "(KOPF_CONTROLPLANE_BIN=/path/to/dir with prebuilt etcd and kube-apiserver also works.)",
        file=sys.stderr)
    sys.exit(2)


def main() -> int:
    check_prerequisites()
    print(__doc__.strip().split('\n\n')[0])
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    facts: dict[str, Any] = {}
    narrator = Narrator()
    plane = ControlPlane()
    operator: OperatorProcess | None = None
    watch: ObjectWatch | None = None
    try:
        heading("1. A local Kubernetes API server")
        say("Starting etcd and kube-apiserver (the first run builds them with Go: several minutes)...")
        plane.start()
        assert plane.kubeconfig is not None
        say(f"The API server is up at {plane.server} (in {plane.startup_seconds:.1f}s).")
        say(f"A kubeconfig for it: {plane.kubeconfig}")
        api = KubeAPI(plane)
        install_crd(api, yaml.safe_load((REPO / 'examples' / 'crd.yaml').read_text()))
        api.ensure_namespace(NAMESPACE)
        say("The KopfExample resource (examples/crd.yaml) is installed; namespace 'kopf-demo' is created.")

        heading("2. The operator")
        say(f"Running: kopf run {OPERATOR.relative_to(REPO)} -n {NAMESPACE}")
        say("It has three create handlers (provision, configure, announce) and a delete handler (release);")
        say("'configure' is not ready on its first attempt and asks to be retried 3 seconds later.", detail=True)
        operator = OperatorProcess(plane.kubeconfig, events)
        facts['serving'] = False

        def serving() -> bool:
            return any('Serving kopfexamples' in line for line in operator.lines) if operator else False

        run_until(events, narrator, facts, serving, "the operator to start serving kopfexamples")

        heading("3. Creating an object")
        collection = f"/apis/kopf.dev/v1/namespaces/{NAMESPACE}/kopfexamples"
        listing = api.get(collection)
        watch = ObjectWatch(plane, listing['metadata']['resourceVersion'], events)
        obj = yaml.safe_load((REPO / 'examples' / 'obj.yaml').read_text())
        obj['metadata']['name'] = NAME
        obj['spec']['size'] = '5Gi'
        say(f"Creating {NAMESPACE}/{NAME} with the spec {json.dumps(obj['spec'])}.")
        say("From here on, every line is a change that kopf made to the object, as the API server reports it,")
        say("or a line of the operator's log ('operator |').", detail=True)
        api.create(collection, obj)
        run_until(events, narrator, facts, lambda: narrator.created_and_handled,
                  "all create handlers to finish")
        drain(events, narrator, facts, 0.5)

        heading("4. Deleting the object")
        say(f"Deleting {NAMESPACE}/{NAME}.")
        api.delete(f"{collection}/{NAME}")
        run_until(events, narrator, facts, lambda: narrator.gone, "the object to be deleted")
        drain(events, narrator, facts, 0.5)

        heading("5. Stopping")
        say("Stopping the operator with SIGTERM (what Kubernetes does to a pod), gracefully:")
        code = operator.stop()
        drain(events, narrator, facts, 0.2)
        facts['exit_code'] = code
        operator = None
        if code != 0:
            raise DemoFailed(f"The operator has exited with code {code}.")
        say(f"The operator has exited with code {code}.")
    except KeyboardInterrupt:
        say("Interrupted; cleaning up.")
        return 130
    except (DemoFailed, ControlPlaneError, KubeAPIError, AssertionError) as e:
        say(f"The demo has failed: {e}")
        if operator is not None:
            print("\nThe operator's output:\n" + '\n'.join(operator.lines), file=sys.stderr)
        return 1
    finally:
        if operator is not None:
            operator.stop()
        if watch is not None:
            watch.close()
        plane.stop()
        say("The control plane is stopped and its temporary directory removed.")

    summary(narrator, facts)
    return 0


def summary(narrator: Narrator, facts: dict[str, Any]) -> None:
    heading("What happened")
    attempts: dict[str, int] = {}
    for handler in HANDLERS:
        last = (narrator.records.get(handler) or [{}])[-1]
        # The final record is written and purged in the same patch: only the earlier ones can be seen.
        done_unseen = not last.get('success') and not last.get('failure') and handler in narrator.results
        attempts[handler] = (last.get('retries') or 0) + (1 if done_unseen else 0)
    failures = [(handler, record.get('message')) for handler, records in narrator.records.items()
                for record in records if record.get('delayed')]
    lines = [
        "kopf put its finalizer on the new object first, so that no deletion could skip the delete handler."
        if narrator.finalizer_added else None,
        f"The create handlers ran one after another (the quick ones sharing one patch), and their progress was "
        f"kept on the object itself, "
        f"in annotations {PREFIX}/<handler> (up to {narrator.most_at_once} at a time): "
        + ', '.join(f"{handler} ({n} attempt{'s' if n != 1 else ''})" for handler, n in attempts.items()) + '.',
        ' '.join(f"{handler!r} failed temporarily with {message!r}; its record said when to retry, and kopf "
                 f"retried it then." for handler, message in failures) or None,
        "Nothing of this was kept in the operator's memory: a restarted operator would have continued from "
        "the records on the object.",
        f"The wake-up marker {TOUCH} made the server send an event when the retry was due."
        if narrator.touched else None,
        "When all handlers had succeeded, kopf purged the progress annotations and stored the object's essence "
        f"as the last handled configuration: {narrator.diffbase}" if narrator.purged and narrator.diffbase else None,
        "The handlers' return values went to the status: "
        + ', '.join(f"status.{key}" for key in narrator.results) + '.',
        "On deletion, the delete handler 'release' ran; then kopf removed its finalizer and Kubernetes deleted "
        "the object." if facts.get('delete_handler') and narrator.finalizer_removed and narrator.gone else None,
        f"The operator stopped gracefully (exit code {facts.get('exit_code')}); the control plane was shut down.",
    ]
    for number, line in enumerate((line for line in lines if line), start=1):
        with _print_lock:
            print(f"{number}. {line}")
    with _print_lock:
        print(f"\nThe demo took {time.monotonic() - _started:.0f}s. Next: examples/README files and docs/ "
              f"(e.g. docs/walkthrough.rst).")


if __name__ == '__main__':
    sys.exit(main())

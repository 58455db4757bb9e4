"""
The test kit's command line: ``python -m kopf.testing {build,up}``.

``build`` finds or builds the binaries of the control plane (e.g. to fill a
CI cache before the tests) and prints their directory; ``up`` runs a control
plane in the foreground until Ctrl-C or SIGTERM, for poking at it by hand
(``KUBECONFIG=... kubectl ...``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from kopf._testkit import binaries
from kopf._testkit.controlplane import ControlPlane, ControlPlaneError


def _build() -> int:
    """Build (or reuse) the binaries and print where they are."""
    print(binaries.ensure(progress=_progress))
    return 0


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _up(workdir: Path | None, timeout: float) -> int:
    """Run until a signal arrives, then stop cleanly; non-zero if a server dies."""
    stopping = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    # While starting, SIGTERM acts like Ctrl-C, so a half-started plane is cleaned up.
    signal.signal(signal.SIGTERM, interrupt)
    plane = ControlPlane(workdir, start_timeout=timeout, progress=_progress)
    try:
        plane.start()
        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        print(f"server:     {plane.server}")
        print(f"kubeconfig: {plane.kubeconfig}")
        print(f"workdir:    {plane.workdir}")
        print(f"ready in {plane.startup_seconds:.1f}s")
        print("Press Ctrl-C to stop.", flush=True)
        while not stopping.wait(1.0):
            if not plane.running:
                print(
                    "A control-plane process exited unexpectedly; see the logs in the workdir.",
                    file=sys.stderr,
                )
                return 1
        print("Stopping...", flush=True)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and dispatch."""
    parser = argparse.ArgumentParser(prog="python -m kopf.testing", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the binaries and print their directory")
    up = commands.add_parser("up", help="run a control plane until Ctrl-C/SIGTERM")
    up.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="use (and keep) this directory instead of a temporary one",
    )
    up.add_argument("--timeout", type=float, default=120.0, help="startup timeout, seconds")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            return _build()
        return _up(args.workdir, args.timeout)
    except (ControlPlaneError, binaries.BinariesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

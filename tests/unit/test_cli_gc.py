"""Every `vigil` command runs with the collector's thresholds raised (monitor.cli.main: the checker's
state is millions of small objects; `vigil bench` measured the checking time nearly halved)."""

from __future__ import annotations

import subprocess
import sys


def test_a_vigil_command_runs_with_the_raised_collector_thresholds():
    code = ("import gc, sys\nsys.argv = ['vigil', '--help']\nfrom monitor.cli import GC_THRESHOLDS, main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint(gc.get_threshold() == GC_THRESHOLDS != (700, 10, 10))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "True", out.stdout + out.stderr

"""pic.engine.report's public names resolve on first use (its submodules are imported then, not at
``import pic.engine.report``): every name of ``__all__`` resolves, to the submodule that defines it."""

from __future__ import annotations

import subprocess
import sys


def test_report_names_resolve_lazily():
    code = ("import sys, pic.engine.report as r; import pic.engine.report.headline; "
            "assert 'pic.engine.report.html' not in sys.modules; "
            "assert sorted(r.__all__) == sorted(r._WHERE); "
            "[getattr(r, n) for n in r.__all__]; "
            "assert r.make_report.__module__ == 'pic.engine.report.html'")
    subprocess.run([sys.executable, "-c", code], check=True)

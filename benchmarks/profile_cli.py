"""cProfile (process CPU time) of a whole `pic` command, imports included (issue #12).

    PYTHONPATH=. python3 benchmarks/profile_cli.py replay TRACE --policy prefix -o /tmp/run --force --json
    PYTHONPATH=. python3 benchmarks/profile_cli.py --top 60 replay TRACE --policy irminsul -o /tmp/run --limit 4000

Prints the command's own output, then (on stderr) the total CPU seconds and the top functions by
cumulative time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    top = 45
    if args[:1] == ["--top"]:
        top, args = int(args[1]), args[2:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return
    t0 = time.process_time()
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    sys.argv = ["pic", *args]
    rc = 0
    try:
        import pic.cli.app as app
        app.main()
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 0
    finally:
        prof.disable()
    print(f"total CPU {time.process_time() - t0:.3f} s (exit {rc})", file=sys.stderr)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    main()

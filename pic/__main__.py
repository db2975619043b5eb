import gc

# NOTE (speed): no cyclic-GC pass over what the CLI's imports build (it all lives to the end); frozen once
# built, so no later pass walks it either (pic.cli.app.main does the same around the command's imports)
gc.disable()
from pic.cli.app import run  # noqa: E402

gc.freeze()
gc.enable()
run()

from pic.cli.startup import imports_without_gc

with imports_without_gc():
    from pic.cli.app import run
run()

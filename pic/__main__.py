from pic.cli.app import run

run()

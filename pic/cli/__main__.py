from pic.cli.app import main

main()

from pic_cli.app import main

main()

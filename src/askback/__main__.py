from askback.cli import main

main()

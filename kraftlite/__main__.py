from kraftlite.cli import main

main()

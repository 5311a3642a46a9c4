from mint.cli import main

main()

from grandbo.cli import main

main()

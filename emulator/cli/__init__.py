"""Every `python -m emulator` command: argument wiring over the packages below (emulator/__main__.py
dispatches). Each module has `COMMANDS`, `add_parser(sub)` and `run(args)`."""

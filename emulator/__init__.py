"""The emulator package; its modules come with later issues (see design.md for the layout)."""

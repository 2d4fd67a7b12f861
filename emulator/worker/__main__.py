"""`python -m emulator.worker --node NODE --settings FILE`: one worker process."""

from emulator.worker.worker import exit_at_once, main

exit_at_once(main())

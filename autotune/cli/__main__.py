"""``python -m autotune.cli``: the ``autotune`` command."""
import sys

from autotune.cli.command import main

sys.exit(main())

"""`python -m flywheel ...` is the `platform` command."""

import sys

from flywheel.cli import main

if __name__ == "__main__":
    sys.exit(main())

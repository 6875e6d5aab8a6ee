"""``python -m attnsim`` runs the command-line interface."""

import sys

from attnsim.cli import main

if __name__ == "__main__":
    sys.exit(main())

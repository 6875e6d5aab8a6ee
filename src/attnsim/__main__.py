"""``python -m attnsim`` runs the command-line interface."""

import sys

if __name__ == "__main__":
    try:
        from attnsim.cli import main

        status = main()
    except KeyboardInterrupt:  # Ctrl-C before a command started (e.g. while importing)
        print("attnsim: interrupted (Ctrl-C)", file=sys.stderr)
        status = 130
    sys.exit(status)

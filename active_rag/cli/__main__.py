"""``python -m active_rag.cli``: the ``active-rag`` command line."""

import sys

from .commands import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m stepscope`` runs the command line."""

import sys

from stepscope.cli import main

sys.exit(main())

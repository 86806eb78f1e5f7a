"""``python -m treeopt``."""

import sys

from treeopt.cli import main

sys.exit(main())
